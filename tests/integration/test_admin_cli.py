"""The administration CLI as real subprocesses (``python -m skiplock ...``) on a real server.

Exit codes: 0 done, 3 valid but nothing changed, 1 error (one ``error:`` line), 2 usage.
Independent invocations run side by side to keep the file quick.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import psycopg
import pytest
from psycopg import sql

from helpers.polling import wait_for
from skiplock import App

pytestmark = pytest.mark.slow


@dataclass
class Result:
    args: list[str]
    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return (
            f"skiplock {' '.join(self.args)} -> {self.code}\nstdout: {self.out}\nstderr: {self.err}"
        )


def run_all(app: App, *commands: list[str], cwd: Path | None = None) -> list[Result]:
    """Run ``python -m skiplock <command> --dsn .. --schema ..`` for each command, in parallel
    (in ``cwd``, where an APP's module may be).  Output is what a pipe sees."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    env["COLUMNS"] = "80"
    procs = []
    for command in commands:
        schema = [] if "--schema" in command else ["--schema", app.schema]
        argv = [sys.executable, "-m", "skiplock", *command, "--dsn", app.dsn, *schema]
        procs.append(
            (
                command,
                subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,  # no terminal: a command never waits for an answer
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=cwd,
                ),
            )
        )
    results = []
    for command, proc in procs:
        out, err = proc.communicate(timeout=60)
        results.append(Result(command, proc.returncode, out, err))
    return results


def run(app: App, *command: str, cwd: Path | None = None) -> Result:
    return run_all(app, list(command), cwd=cwd)[0]


def jobs_table(app: App) -> str:
    return f'"{app.schema}".jobs'


def set_status(db: Any, app: App, ids: list[int], status: str) -> None:
    finished = status in ("done", "failed", "cancelled")
    db.execute(
        f"UPDATE {jobs_table(app)} SET status = %s, "
        "finished_at = CASE WHEN %s THEN now() END, "
        "last_error = CASE WHEN %s = 'failed' THEN 'ValueError: boom' END "
        "WHERE id = ANY(%s)",
        (status, finished, status, ids),
    )


@pytest.fixture
def tasks(app: App) -> App:
    @app.task(name="mail.send", queue="emails")
    def send(to: str) -> None: ...

    @app.task(name="video.encode", queue="video_transcoding_high")
    def encode(n: int) -> None: ...

    @app.task(name="video.thumb", queue="video_transcoding_low")
    def thumb(n: int) -> None: ...

    return app


def test_status_json_counts_match_the_table_and_the_table_names_every_queue(
    tasks: App, db: Any
) -> None:
    app = tasks
    mails = [e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(5)])]
    set_status(db, app, mails[:1], "done")
    set_status(db, app, mails[1:2], "failed")
    high = [e.id for e in app.enqueue_many("video.encode", [{"n": 1}, {"n": 2}])]
    db.execute(
        f"UPDATE {jobs_table(app)} SET run_at = now() - interval '1 hour' WHERE id = %s",
        (high[0],),
    )
    app.enqueue("video.thumb", {"n": 1}, delay=3600)

    as_json, table, missing = run_all(
        app, ["status", "--json"], ["status"], ["status", "--schema", "no_such_schema_here"]
    )
    assert as_json.code == 0, as_json
    rows = {r["queue"]: r for r in json.loads(as_json.out)}
    expected: dict[str, dict[str, int]] = {}
    for queue, status, n in db.execute(
        f"SELECT queue, status, count(*) FROM {jobs_table(app)} GROUP BY queue, status"
    ):
        expected.setdefault(queue, {})[status] = n
    assert set(rows) == {"emails", "video_transcoding_high", "video_transcoding_low"}
    for queue, counts in expected.items():
        for status in ("pending", "scheduled", "running", "failed", "done", "cancelled"):
            assert rows[queue][status] == counts.get(status, 0), (queue, status, rows[queue])
    assert 3600 <= rows["video_transcoding_high"]["oldest_pending_seconds"] < 3900
    assert 0 <= rows["emails"]["oldest_pending_seconds"] < 300
    assert rows["video_transcoding_low"]["oldest_pending_seconds"] is None
    assert "finished_last_minute" in rows["emails"]

    assert table.code == 0, table
    for queue in rows:  # two of them share a long prefix: only the full name tells them apart
        assert queue in table.out, f"queue {queue!r} not shown in the table:\n{table.out}"
    age = rows["video_transcoding_high"]["oldest_pending_seconds"]
    assert re.search(r"\b36\d\d\.\ds\b", table.out), f"age {age:.1f}s not shown:\n{table.out}"

    assert missing.code == 1, missing
    assert missing.err.startswith("error:") and len(missing.err.strip().splitlines()) == 1


def test_status_counts_the_live_workers_of_each_queue(tasks: App, db: Any) -> None:
    app = tasks
    app.enqueue_many("mail.send", [{"to": "a"}, {"to": "b"}])
    app.enqueue("video.encode", {"n": 1})
    for worker_id, queues, ago in (
        ("live-1", "{emails,idle_but_served}", 1),
        ("live-2", "{emails}", 3),
        ("killed", "{video_transcoding_high}", 600),
    ):
        db.execute(
            f'INSERT INTO "{app.schema}".workers (id, host, pid, queues, concurrency, model, '
            "version, seen_at) VALUES (%s, 'h', 1, %s, 1, 'lease', '0', "
            "now() - make_interval(secs => %s))",
            (worker_id, queues, ago),
        )
    as_json, table = run_all(app, ["status", "--json"], ["status"])
    rows = {r["queue"]: r for r in json.loads(as_json.out)}
    assert {q: r["workers"] for q, r in rows.items()} == {
        "emails": 2, "idle_but_served": 1, "video_transcoding_high": 0,
    }  # fmt: skip
    assert rows["idle_but_served"]["pending"] == 0
    line = next(x for x in table.out.splitlines() if "video_transcoding_high" in x)
    assert re.search(r"│\s+0\s+│", line), line  # due jobs and no worker: shown (in red)


def test_status_watch_shows_the_counts_again_until_interrupted(tasks: App) -> None:
    app = tasks
    app.enqueue_many("mail.send", [{"to": "a"}, {"to": "b"}])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    argv = [sys.executable, "-m", "skiplock", "status", "--watch", "0.2", "--json",
            "--dsn", app.dsn, "--schema", app.schema]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    app.enqueue_many("mail.send", [{"to": "c"}])  # the next lines see it
    pending = [first["queues"][0]["pending"]]
    while pending[-1] != 3 and len(pending) < 50:
        pending.append(json.loads(proc.stdout.readline())["queues"][0]["pending"])
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert pending[0] == 2 and pending[-1] == 3, pending
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert first["at"] and first["queues"][0]["queue"] == "emails"

    table = run(app, "status")  # without --watch: once, as before
    assert table.code == 0 and table.out.count("skiplock queues") == 1

    # On a terminal the table is redrawn in place (rich's Live), with the new count.
    import pty
    import select

    controller, terminal = pty.openpty()
    argv = [a for a in argv if a != "--json"]
    proc = subprocess.Popen(argv, env={**env, "COLUMNS": "160"}, stdout=terminal,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    os.close(terminal)
    shown = b""
    try:
        while b"skiplock queues" not in shown:
            assert select.select([controller], [], [], 30)[0], shown
            shown += os.read(controller, 65536)
        app.enqueue_many("mail.send", [{"to": "d"}])
        deadline = time.monotonic() + 30
        while not re.search(rb"emails\W+4\b", shown) and time.monotonic() < deadline:
            if select.select([controller], [], [], 1)[0]:
                shown += os.read(controller, 65536)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(controller)
    assert re.search(rb"emails\W+4\b", shown), shown[-2000:]
    assert b"\x1b[" in shown  # drawn with terminal control sequences, not printed again
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_status_watch_stops_between_reads_and_a_second_ctrl_c_at_once(
    tasks: App, pg_dsn: str
) -> None:
    """Ctrl-C during a read (here one waiting on a lock) lets the read finish and print, then
    exits 0: an interrupt inside the driver's or the pool's code could leave a query running
    or the pool's lock held (the watch once never exited).  A second Ctrl-C does not wait."""
    import psycopg

    app = tasks
    app.enqueue_many("mail.send", [{"to": "a"}])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    argv = [sys.executable, "-m", "skiplock", "status", "--watch", "0.2", "--json",
            "--dsn", app.dsn, "--schema", app.schema]  # fmt: skip

    def blocked_read(locker: psycopg.Connection[Any]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
        assert proc.stdout is not None
        json.loads(proc.stdout.readline())  # it reads; now its next read waits on a lock
        locker.execute(f"LOCK TABLE {jobs_table(app)} IN ACCESS EXCLUSIVE MODE")

        def waiting() -> int:
            row = locker.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
                (jobs_table(app),),
            ).fetchone()
            return int(row[0]) if row else 0

        wait_for(waiting, 30, "the watch's read to wait on the lock")
        return proc

    with psycopg.connect(pg_dsn) as locker:  # a transaction: the lock holds until commit
        proc = blocked_read(locker)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the read it was in goes on
        locker.execute(
            f"INSERT INTO {jobs_table(app)} (queue, task, payload) "
            "VALUES ('emails', 'mail.send', '{}')"
        )
        locker.commit()
        out, err = proc.communicate(timeout=30)
    # The read that was waiting saw the insert and was the last; any before it (if the lock came
    # after another 0.2 s turn) saw the one job.
    pending = [json.loads(x)["queues"][0]["pending"] for x in out.splitlines()]
    assert pending[-1] == 2 and set(pending[:-1]) <= {1}, out
    assert proc.returncode == 0 and err == "", err

    with psycopg.connect(pg_dsn) as locker:
        proc = blocked_read(locker)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # while the lock is still held
        locker.rollback()
    assert proc.returncode == 1 and "Aborted" in err, err


def test_jobs_list_and_show(tasks: App, db: Any) -> None:
    app = tasks
    ids = [e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(4)])]
    set_status(db, app, ids[:2], "failed")

    listed, shown, absent = run_all(
        app,
        ["jobs", "list", "--status", "failed", "--json"],
        ["jobs", "show", str(ids[0]), "--json"],
        ["jobs", "show", "999999999", "--json"],
    )
    assert listed.code == 0, listed
    found = json.loads(listed.out)
    assert sorted(j["id"] for j in found) == sorted(ids[:2])
    assert {j["status"] for j in found} == {"failed"}

    assert shown.code == 0, shown
    job = json.loads(shown.out)
    assert (job["id"], job["status"], job["task"], job["queue"]) == (
        ids[0],
        "failed",
        "mail.send",
        "emails",
    )
    assert job["payload"] == {"to": "u0"}
    assert job["last_error"] == "ValueError: boom"

    assert absent.code == 3, absent
    assert absent.out == ""


def test_status_shows_queue_settings_and_jobs_list_pages_by_id(tasks: App, db: Any) -> None:
    app = tasks
    ids = [e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(5)])]
    app.sync_client.set_paused("idle_queue", True)  # settings, but no job ever
    app.sync_client.set_concurrency_limit("emails", 3)

    status, table, first, second = run_all(
        app,
        ["status", "--json"],
        ["status"],
        ["jobs", "list", "--limit", "2", "--json"],
        ["jobs", "list", "--limit", "2", "--before", str(ids[3]), "--json"],
    )
    rows = {r["queue"]: r for r in json.loads(status.out)}
    assert rows["idle_queue"]["paused"] is True and rows["idle_queue"]["pending"] == 0
    assert (rows["emails"]["paused"], rows["emails"]["concurrency_limit"]) == (False, 3)
    assert rows["emails"]["pending"] == 5
    assert "idle_queue" in table.out and "paused" in table.out, table
    assert "at most 3 running" in table.out, table
    assert [j["id"] for j in json.loads(first.out)] == [ids[4], ids[3]]
    assert [j["id"] for j in json.loads(second.out)] == [ids[2], ids[1]]


def test_retry_and_cancel_exit_codes(tasks: App, db: Any) -> None:
    app = tasks
    failed, pending, to_cancel, done = (
        e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(4)])
    )
    set_status(db, app, [failed], "failed")
    set_status(db, app, [done], "done")

    results = run_all(
        app,
        ["retry", str(failed)],
        ["retry", str(pending)],
        ["cancel", str(to_cancel)],
        ["cancel", str(done)],
        ["cancel", "999999999"],
    )
    assert [r.code for r in results] == [0, 3, 0, 3, 3], "\n".join(map(str, results))
    status = dict(db.execute(f"SELECT id, status FROM {jobs_table(app)}").fetchall())
    assert status == {failed: "pending", pending: "pending", to_cancel: "cancelled", done: "done"}
    for r in results:
        if r.code == 3:
            assert r.err.strip(), f"no explanation on stderr: {r}"


def test_cancel_of_a_job_whose_row_stays_locked_asks_its_worker_and_exits_0(
    tasks: App, db: Any
) -> None:
    """A row locked for longer than a moment is a held-lock job running: its worker is asked
    by NOTIFY (on the schema's channel), and the command says so and succeeds."""
    app = tasks
    job_id = app.enqueue("mail.send", {"to": "u"}).id
    db.execute(sql.SQL("LISTEN {}").format(sql.Identifier(app.queries.channel)))
    with psycopg.connect(app.dsn) as holder:
        holder.execute(f"SELECT 1 FROM {jobs_table(app)} WHERE id = %s FOR UPDATE", (job_id,))
        text, as_json = run_all(app, ["cancel", str(job_id)], ["cancel", str(job_id), "--json"])
        holder.rollback()
    assert (text.code, as_json.code) == (0, 0), f"{text}\n{as_json}"
    assert "held row lock" in text.err, text
    assert json.loads(as_json.out) == {"job": job_id, "outcome": "held"}
    payloads = [n.payload for n in db.notifies(timeout=1.0, stop_after=2)]
    assert payloads == [f"!cancel:{job_id}"] * 2
    assert db.execute(
        f"SELECT status FROM {jobs_table(app)} WHERE id = %s", (job_id,)
    ).fetchone() == ("pending",)


def test_single_retry_and_cancel_answer_in_json_too(tasks: App, db: Any) -> None:
    app = tasks
    failed, pending, done = (
        e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(3)])
    )
    set_status(db, app, [failed], "failed")
    set_status(db, app, [done], "done")
    retried, not_retried = run_all(
        app, ["retry", str(failed), "--json"], ["retry", str(pending), "--json"]
    )
    cancelled, finished = run_all(
        app, ["cancel", str(pending), "--json"], ["cancel", str(done), "--json"]
    )
    answers = [(r.code, json.loads(r.out)) for r in (retried, not_retried, cancelled, finished)]
    assert answers == [
        (0, {"job": failed, "retried": True}),
        (3, {"job": pending, "retried": False}),
        (0, {"job": pending, "outcome": "cancelled"}),
        (3, {"job": done, "outcome": "unchanged"}),
    ]


def test_bulk_retry_and_cancel_from_the_command_line(tasks: App, db: Any) -> None:
    app = tasks
    mails = [e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(5)])]
    video = [e.id for e in app.enqueue_many("video.encode", [{"n": i} for i in range(2)])]
    set_status(db, app, mails[:3] + video[:1], "failed")

    def statuses() -> dict[int, str]:
        return dict(db.execute(f"SELECT id, status FROM {jobs_table(app)}").fetchall())

    before = statuses()
    usage = run_all(
        app,
        ["retry"],
        ["retry", str(mails[0]), "--all"],
        ["retry", str(mails[0]), "--queue", "emails"],
        ["cancel", "--all", "--queue", "emails"],  # no terminal to ask on, and no --yes
        ["retry", "--all", "--queue", "emails", "--dry-run", "--json"],
        ["cancel", "--all", "--running", "--dry-run"],
        ["retry", "--all", "--queue", "no_jobs_here", "--yes"],
    )
    assert [r.code for r in usage] == [2, 2, 2, 2, 0, 0, 3], "\n".join(map(str, usage))
    assert "--yes" in usage[3].err and "pending: 2" in usage[3].err
    assert json.loads(usage[4].out) == {"matching": {"failed": 3}}
    assert usage[5].out.strip() == "3 matching jobs (pending: 3)"
    assert statuses() == before, "a refused or dry run changed jobs"

    retried = run(app, "retry", "--all", "--queue", "emails", "--yes", "--json")
    assert retried.code == 0 and json.loads(retried.out) == {"retried": 3, "skipped": 0}, retried
    after = statuses()
    assert {after[i] for i in mails} == {"pending"} and after[video[0]] == "failed"

    cancelled = run(app, "cancel", "--all", "--task", "mail.send", "-y")
    assert cancelled.code == 0, cancelled
    assert cancelled.out.strip() == "cancelled 5 jobs of task mail.send that had not started"
    assert run(app, "cancel", "--all", "--task", "mail.send", "-y").code == 3
    after = statuses()
    assert {after[i] for i in mails} == {"cancelled"} and after[video[1]] == "pending"


def run_in_terminal(app: App, answer: str, *command: str) -> Result:
    """Run a command whose stdin is a terminal that has ``answer`` typed into it."""
    import pty

    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    argv = [sys.executable, "-m", "skiplock", *command, "--dsn", app.dsn, "--schema", app.schema]
    try:
        os.write(controller, answer.encode() + b"\n")
        proc = subprocess.run(
            argv, env=env, stdin=terminal, capture_output=True, text=True, timeout=60
        )
    finally:
        os.close(terminal)
        os.close(controller)
    return Result(list(command), proc.returncode, proc.stdout, proc.stderr)


def test_a_bulk_change_asks_first_on_a_terminal(tasks: App, db: Any) -> None:
    app = tasks
    ids = [e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(3)])]
    set_status(db, app, ids, "failed")
    count = f"SELECT count(*) FROM {jobs_table(app)} WHERE status = 'failed'"

    refused = run_in_terminal(app, "n", "retry", "--all", "--queue", "emails")
    assert refused.code == 1, refused
    assert "Retry 3 jobs of queue emails (failed: 3)? [y/N]" in refused.out, refused
    assert db.execute(count).fetchone() == (3,)

    accepted = run_in_terminal(app, "y", "retry", "--all", "--queue", "emails")
    assert accepted.code == 0, accepted
    assert "retried 3 jobs of queue emails" in accepted.out
    assert db.execute(count).fetchone() == (0,)


def test_bulk_delete_of_finished_jobs_from_the_command_line(tasks: App, db: Any) -> None:
    app = tasks
    mails = [e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(8)])]
    video = [e.id for e in app.enqueue_many("video.encode", [{"n": i} for i in range(2)])]
    set_status(db, app, mails[0:2] + video[0:1], "done")
    set_status(db, app, mails[2:5], "failed")
    set_status(db, app, mails[5:6], "cancelled")
    db.execute(  # two of the failed mails finished two hours ago
        f"UPDATE {jobs_table(app)} SET finished_at = now() - interval '2 hours' WHERE id = ANY(%s)",
        (mails[2:4],),
    )

    def left() -> set[int]:
        return {i for (i,) in db.execute(f"SELECT id FROM {jobs_table(app)}")}

    before = left()
    usage = run_all(
        app,
        ["delete"],  # neither --all nor a filter: what to delete is never implied
        ["delete", "--all", "--status", "pending"],  # never an unfinished job
        ["delete", "--all", "--queue", "emails"],  # no terminal to ask on, and no --yes
        ["delete", "--all", "--queue", "emails", "--dry-run", "--json"],
        ["delete", "--all", "--status", "failed", "--older-than", "3600", "--dry-run"],
        ["delete", "--all", "--queue", "no_jobs_here", "--yes"],
        ["delete", "--all", "--older-than", "60", "--finished-within", "30", "--yes"],
    )
    assert [r.code for r in usage] == [2, 2, 2, 0, 0, 3, 2], "\n".join(map(str, usage))
    assert "--yes" in usage[2].err and "failed: 3" in usage[2].err
    assert json.loads(usage[3].out) == {"matching": {"cancelled": 1, "done": 2, "failed": 3}}
    assert usage[4].out.strip() == "2 matching jobs finished over 3600s ago (failed: 2)"
    assert left() == before, "a refused or dry run deleted jobs"

    old = run(app, "delete", "--all", "--status", "failed", "--older-than", "3600", "-y", "--json")
    assert old.code == 0 and json.loads(old.out) == {"deleted": 2, "skipped": 0}, old
    assert left() == before - set(mails[2:4])

    done = run(app, "delete", "--all", "--queue", "emails", "--status", "done", "--yes")
    assert done.code == 0, done
    assert done.out.strip() == "deleted 2 finished jobs of queue emails"
    everything = run(app, "delete", "--all", "--yes")
    assert everything.code == 0 and "deleted 3 finished jobs" in everything.out, everything
    assert left() == set(mails[6:] + video[1:]), "only the unfinished jobs are left"
    assert run(app, "delete", "--all", "--yes").code == 3


def test_bulk_delete_asks_first_on_a_terminal(tasks: App, db: Any) -> None:
    app = tasks
    ids = [e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(3)])]
    set_status(db, app, ids, "done")
    count = f"SELECT count(*) FROM {jobs_table(app)}"

    refused = run_in_terminal(app, "n", "delete", "--all", "--task", "mail.send")
    assert refused.code == 1, refused
    assert "Delete 3 jobs of task mail.send (done: 3)? [y/N]" in refused.out, refused
    assert db.execute(count).fetchone() == (3,)

    accepted = run_in_terminal(app, "y", "delete", "--all", "--task", "mail.send")
    assert accepted.code == 0 and "deleted 3 finished jobs" in accepted.out, accepted
    assert db.execute(count).fetchone() == (0,)


def test_retry_of_a_job_whose_key_is_taken_says_which_job_holds_it(tasks: App, db: Any) -> None:
    app = tasks
    send = app.get_task("mail.send").with_options(idempotency_key="welcome:7")
    failed = send.enqueue(to="a").id
    set_status(db, app, [failed], "failed")
    holder = send.enqueue(to="b").id
    result = run(app, "retry", str(failed))
    assert result.code == 1, result
    assert result.err.strip() == (
        f"error: job {failed} cannot be retried: unfinished job {holder} holds its idempotency"
        " key 'welcome:7'; wait for that job to finish, or cancel it, then retry"
    )


SHOP = """
SHOP = "not an app"
from skiplock import App

app = App(schema={schema!r})


@app.task(name="mail.send", queue="emails")
def send(to: str) -> None: ...


@app.task(name="video.thumb", queue="video_transcoding_low")
def thumb(n: int) -> None: ...


@app.task(name="shop.send_receipt", queue="mail", max_attempts=2, priority=3)
def send_receipt(order_id: int) -> None: ...
"""


@pytest.fixture
def shop(tasks: App, tmp_path: Path) -> Path:
    """A directory holding ``shop.py``, whose ``app`` has the tasks (and schema) of ``tasks``
    plus ``shop.send_receipt`` on queue ``mail`` with 2 attempts."""
    (tmp_path / "shop.py").write_text(SHOP.format(schema=tasks.schema))

    @tasks.task(name="shop.send_receipt", queue="mail", max_attempts=2, priority=3)
    def send_receipt(order_id: int) -> None: ...

    return tmp_path


def test_enqueue_puts_the_job_on_the_tasks_queue_with_its_options(
    tasks: App, shop: Path, db: Any
) -> None:
    app = tasks
    plain, unknown, as_json, raw, raw_without_queue, other_schema = run_all(
        app,
        ["enqueue", "shop:app", "shop.send_receipt", "--payload", '{"order_id": 7}'],
        ["enqueue", "shop:app", "no.such.task"],
        ["enqueue", "shop:app", "shop.send_receipt", "--payload", '{"order_id": 8}', "--json",
         "--priority", "9", "--idempotency-key", "receipt:8"],
        ["enqueue", "--raw", "billing.charge", "--queue", "billing", "--payload", '{"x": 1}',
         "--max-attempts", "3", "--entity-key", "customer:1"],
        ["enqueue", "--raw", "billing.charge"],
        ["enqueue", "shop:app", "shop.send_receipt", "--schema", "elsewhere"],
        cwd=shop,
    )  # fmt: skip
    assert plain.code == 0, plain
    assert plain.out.strip() == "enqueued 1 job of shop.send_receipt on queue mail", plain
    assert unknown.code == 2, unknown
    assert "no task 'no.such.task' in shop:app" in unknown.err, unknown
    assert "shop.send_receipt" in unknown.err and "--raw" in unknown.err, unknown
    assert as_json.code == 0, as_json
    shown = json.loads(as_json.out)
    assert raw.code == 0, raw
    assert raw_without_queue.code == 2 and "--queue" in raw_without_queue.err, raw_without_queue
    assert other_schema.code == 2 and "schema" in other_schema.err, other_schema
    rows = db.execute(
        f"SELECT id, task, queue, max_attempts, priority, payload, idempotency_key, entity_key "
        f"FROM {jobs_table(app)} ORDER BY task, priority"
    ).fetchall()
    assert [row[1:] for row in rows] == [
        ("billing.charge", "billing", 3, 0, {"x": 1}, None, "customer:1"),
        ("shop.send_receipt", "mail", 2, 3, {"order_id": 7}, None, None),
        ("shop.send_receipt", "mail", 2, 9, {"order_id": 8}, "receipt:8", None),
    ], rows
    (made,) = [row[0] for row in rows if row[6] == "receipt:8"]
    assert shown == {
        "task": "shop.send_receipt",
        "queue": "mail",
        "jobs": [{"id": made, "deduplicated": False}],
    }
    again = run(app, "enqueue", "shop:app", "shop.send_receipt", "--payload", '{"order_id": 8}',
                "--idempotency-key", "receipt:8", "--json", cwd=shop)  # fmt: skip
    assert json.loads(again.out)["jobs"] == [{"id": made, "deduplicated": True}], again


def test_enqueue_refuses_a_payload_the_task_cannot_take(tasks: App, shop: Path, db: Any) -> None:
    misspelt, missing = run_all(
        tasks,
        ["enqueue", "shop:app", "shop.send_receipt", "--payload", '{"order_idd": 7}'],
        ["enqueue", "shop:app", "shop.send_receipt"],
        cwd=shop,
    )
    assert misspelt.code == 2 and "unexpected argument 'order_idd'" in misspelt.err, misspelt
    assert missing.code == 2 and "missing argument 'order_id'" in missing.err, missing
    assert "--payload" in missing.err and "Traceback" not in missing.err, missing
    assert db.execute(f"SELECT count(*) FROM {jobs_table(tasks)}").fetchone() == (0,)


def test_enqueue_from_the_command_line(tasks: App, shop: Path, db: Any) -> None:
    app = tasks
    bulk, bad, later = run_all(
        app,
        ["enqueue", "shop:app", "mail.send", "--payload", '{"to": "a"}', "--count", "1000",
         "--queue", "bulk"],
        ["enqueue", "shop:app", "mail.send", "--payload", '{"to":', "--queue", "bad"],
        ["enqueue", "shop:app", "video.thumb", "--payload", '{"n": 7}', "--queue", "later",
         "--delay", "3600", "--priority", "5", "--max-attempts", "2", "--meta",
         '{"source": "ops"}'],
        cwd=shop,
    )  # fmt: skip
    assert bulk.code == 0, bulk
    assert bulk.out.strip() == "enqueued 1,000 jobs of mail.send on queue bulk", bulk
    rows = db.execute(
        f"SELECT task, payload, status, count(*) FROM {jobs_table(app)} WHERE queue = 'bulk' "
        "GROUP BY task, payload, status"
    ).fetchall()
    assert rows == [("mail.send", {"to": "a"}, "pending", 1000)]

    assert bad.code == 2, bad
    assert "--payload" in bad.err and "JSON" in bad.err
    assert "Traceback" not in bad.err
    assert db.execute(f"SELECT count(*) FROM {jobs_table(app)} WHERE queue = 'bad'").fetchone() == (
        0,
    )

    assert later.code == 0, later
    row = db.execute(
        f"SELECT status, priority, max_attempts, payload, run_at > now() + interval '59 minutes', "
        f"meta FROM {jobs_table(app)} WHERE queue = 'later'"
    ).fetchall()
    assert row == [("scheduled", 5, 2, {"n": 7}, True, {"source": "ops"})]
    bad_meta = run(app, "enqueue", "shop:app", "video.thumb", "--payload", '{"n": 1}', "--meta",
                   "[1]", cwd=shop)  # fmt: skip
    assert bad_meta.code != 0 and "meta of a job of task 'video.thumb'" in bad_meta.err, bad_meta


def test_retry_and_cancel_of_a_job_that_does_not_exist_say_so(tasks: App, shop: Path) -> None:
    retried, cancelled, shown, no_attribute, not_an_app = run_all(
        tasks,
        ["retry", "999999999"],
        ["cancel", "999999999"],
        ["jobs", "show", "999999999"],
        ["enqueue", "shop:nope", "mail.send"],
        ["enqueue", "shop:SHOP", "mail.send"],
        cwd=shop,
    )
    for result in (retried, cancelled, shown):
        assert result.code == 3 and result.err.strip() == "no job 999999999", result
    assert no_attribute.code == 2 and "no attribute nope in shop" in no_attribute.err, no_attribute
    assert not_an_app.code == 2 and "'shop:SHOP' is not a skiplock.App" in not_an_app.err


def test_counts_and_limits_read_as_english(tasks: App, db: Any) -> None:
    (job,) = tasks.enqueue_many("mail.send", [{"to": "a"}])
    set_status(db, tasks, [job.id], "failed")
    listed, unlimited, one = run_all(
        tasks, ["jobs", "list"], ["limit", "q1", "none"], ["limit", "q2", "1"]
    )
    assert listed.out.split("\n")[0].strip() == "1 job", listed
    assert unlimited.out.strip() == "queue q1: no limit on running jobs", unlimited
    assert one.out.strip() == "queue q2: at most 1 running job", one
    retried = run(tasks, "retry", "--all", "--yes")
    assert retried.out.strip() == "retried 1 job", retried
    cancelled = run(tasks, "cancel", "--all", "--yes")
    assert cancelled.out.strip() == "cancelled 1 job that had not started", cancelled


def test_help_options_environment_variables_and_error_prefix(tasks: App) -> None:
    from skiplock._cli.worker import command as worker_command

    def cli(*args: str) -> Result:
        argv = [sys.executable, "-m", "skiplock", *args]
        env = {**os.environ, "COLUMNS": "80"}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        return Result(list(args), done.returncode, done.stdout, done.stderr)

    short, worker_short, worker_help, rate_help = (
        cli(*args) for args in (["-h"], ["worker", "-h"], ["worker", "--help"], ["rate", "-h"])
    )
    for result in (short, worker_short):
        assert result.code == 0 and result.out.startswith("Usage:"), result
    assert worker_short.out == worker_help.out
    help_text = "".join(worker_help.out.split())  # click wraps anywhere, even in a name
    for param in worker_command.params:
        envvar = getattr(param, "envvar", None)
        if envvar:
            # click lists an option's variable; an argument's is named in the command's text.
            shown = f"env var: {envvar}" if isinstance(param, click.Option) else f"${envvar}"
            assert shown.replace(" ", "") in help_text, (envvar, worker_help.out)
    assert "N/d" in rate_help.out, rate_help
    usage, ours = run_all(
        tasks, ["limit", "q", "abc"], ["status", "--schema", "no_such_schema_here"]
    )
    assert usage.code == 2 and "error: " in usage.err and "Error" not in usage.err, usage
    assert ours.code == 1 and ours.err.startswith("error: "), ours


def test_pause_resume_and_limit_update_the_queues_table(tasks: App, db: Any) -> None:
    app = tasks

    def queues() -> dict[str, tuple[bool, int | None]]:
        rows = db.execute(f'SELECT name, paused, concurrency_limit FROM "{app.schema}".queues')
        return {name: (paused, limit) for name, paused, limit in rows}

    first = run_all(
        app,
        ["pause", "q1"],
        ["pause", "q2"],
        ["limit", "q3", "2"],
        ["limit", "q4", "2"],
    )
    assert [r.code for r in first] == [0, 0, 0, 0], "\n".join(map(str, first))
    assert queues() == {
        "q1": (True, None),
        "q2": (True, None),
        "q3": (False, 2),
        "q4": (False, 2),
    }
    second = run_all(app, ["resume", "q2"], ["limit", "q4", "none"], ["limit", "q3", "0"])
    assert [r.code for r in second] == [0, 0, 2], "\n".join(map(str, second))
    assert queues() == {
        "q1": (True, None),
        "q2": (False, None),
        "q3": (False, 2),
        "q4": (False, None),
    }


def test_rate_sets_and_removes_a_queue_rate_limit(tasks: App, db: Any) -> None:
    app = tasks
    hourly, halves, bad = run_all(
        app, ["rate", "q6", "100/m"], ["rate", "q7", "5/30"], ["rate", "q8", "fast"]
    )
    assert hourly.code == 0 and hourly.out.strip() == "queue q6: at most 100 starts per 60s"
    assert halves.code == 0 and halves.out.strip() == "queue q7: at most 5 starts per 30s"
    assert bad.code == 2 and "N/s" in bad.err, bad

    def rates() -> dict[str, tuple[int | None, float | None]]:
        rows = db.execute(f'SELECT name, rate_limit, rate_period FROM "{app.schema}".queues')
        return {name: (limit, period) for name, limit, period in rows}

    assert rates() == {"q6": (100, 60.0), "q7": (5, 30.0)}
    status = {r["queue"]: r for r in json.loads(run(app, "status", "--json").out)}
    assert (status["q6"]["rate_limit"], status["q6"]["rate_period"]) == (100, 60.0)
    off = run(app, "rate", "q6", "none")
    assert off.code == 0 and off.out.strip() == "queue q6: no rate limit"
    assert rates() == {"q6": (None, None), "q7": (5, 30.0)}


def test_aging_sets_and_removes_a_queues_aging_step(tasks: App, db: Any) -> None:
    app = tasks
    on, bad, zero = run_all(
        app, ["aging", "q6", "30"], ["aging", "q7", "soon"], ["aging", "q7", "0"]
    )
    assert on.code == 0 and on.out.strip() == (
        "queue q6: pending jobs gain a priority level every 30s waited"
    )
    assert bad.code == 2 and zero.code == 2 and "Traceback" not in bad.err, (bad, zero)

    def steps() -> dict[str, float | None]:
        return dict(db.execute(f'SELECT name, aging_step FROM "{app.schema}".queues'))

    assert steps() == {"q6": 30.0}
    off = run(app, "aging", "q6", "none")
    assert off.code == 0 and off.out.strip() == "queue q6: no aging, priority is strict"
    assert steps() == {"q6": None}


def test_aging_past_its_bound_is_a_usage_error(tasks: App, db: Any) -> None:
    results = run_all(
        tasks, ["aging", "q7", "1e300"], ["aging", "q7", "1e400"], ["aging", "q7", "nan"]
    )
    for result in results:
        assert result.code == 2 and "Traceback" not in result.err, result
        assert "STEP" in result.err
    assert db.execute(f'SELECT count(*) FROM "{tasks.schema}".queues').fetchone() == (0,)


def test_limit_with_a_non_number_is_a_usage_error(tasks: App, db: Any) -> None:
    bad = run(tasks, "limit", "q5", "abc")
    assert bad.code == 2, bad
    assert "Traceback" not in bad.err, bad
    assert "MAX_RUNNING" in bad.err
    assert db.execute(f'SELECT count(*) FROM "{tasks.schema}".queues').fetchone() == (0,)


def test_prune_older_than_zero_deletes_every_finished_job(tasks: App, db: Any) -> None:
    app = tasks
    ids = [e.id for e in app.enqueue_many("mail.send", [{"to": f"u{i}"} for i in range(6)])]
    set_status(db, app, ids[0:2], "done")
    set_status(db, app, ids[2:3], "failed")
    set_status(db, app, ids[3:4], "cancelled")

    pruned = run(app, "prune", "--older-than", "0", "--json")
    assert pruned.code == 0, pruned
    assert json.loads(pruned.out) == {"done": 2, "failed": 1, "cancelled": 1, "archive": 0}
    left = {i for (i,) in db.execute(f"SELECT id FROM {jobs_table(app)}")}
    assert left == set(ids[4:])


def test_enqueue_depends_on_and_show_what_a_waiting_job_waits_for(tasks: App, shop: Path) -> None:
    first = tasks.enqueue("mail.send", {"to": "a@example.com"}, delay=3600).id
    made = run(
        tasks, "enqueue", "shop:app", "mail.send", "--payload", '{"to": "b"}', "--depends-on",
        str(first), "--expires", "600", cwd=shop,
    )  # fmt: skip
    assert made.code == 0, made
    waiting = tasks.sync_client.list_jobs(status="waiting")
    assert len(waiting) == 1 and waiting[0].expires_at is not None
    shown, as_json, bad = run_all(
        tasks,
        ["jobs", "show", str(waiting[0].id)],
        ["jobs", "show", str(waiting[0].id), "--json"],
        ["enqueue", "shop:app", "mail.send", "--payload", '{"to": "c"}', "--depends-on",
         "999999999"],
        cwd=shop,
    )  # fmt: skip
    assert f'waits_for: {{"{first}": "scheduled"}}' in shown.out, shown
    assert json.loads(as_json.out)["waits_for"] == {str(first): "scheduled"}
    assert bad.code == 2 and "no job was ever enqueued with id 999999999" in bad.err, bad
    status = run(tasks, "status", "--json")
    (emails,) = [q for q in json.loads(status.out) if q["queue"] == "emails"]
    assert (emails["waiting"], emails["scheduled"]) == (1, 1)


def test_enqueue_says_when_an_idempotency_key_returned_an_existing_job(
    tasks: App, shop: Path, db: Any
) -> None:
    """An enqueue whose idempotency key names an unfinished job makes no job: the command says
    so rather than 'enqueued 1 job'; a payload that is no JSON object is a usage error (2)."""
    enqueue = ["enqueue", "shop:app", "shop.send_receipt", "--payload", '{"order_id": 8}',
               "--idempotency-key", "receipt:8"]  # fmt: skip
    first = run(tasks, *enqueue, "--count", "3", cwd=shop)
    again = run(tasks, *enqueue, cwd=shop)
    (job,) = db.execute(f"SELECT id FROM {jobs_table(tasks)}").fetchall()
    assert first.code == 0 and again.code == 0, (first, again)
    assert first.out.strip() == (
        "enqueued 1 job of shop.send_receipt on queue mail; 2 enqueues found job "
        f"{job[0]} unfinished with idempotency key 'receipt:8' and returned it"
    ), first
    assert again.out.strip() == (
        "enqueued 0 jobs of shop.send_receipt on queue mail; 1 enqueue found job "
        f"{job[0]} unfinished with idempotency key 'receipt:8' and returned it"
    ), again
    not_an_object = run(tasks, "enqueue", "shop:app", "shop.send_receipt", "--payload", "[1]",
                        cwd=shop)  # fmt: skip
    assert not_an_object.code == 2, not_an_object
    assert "must be a mapping" in not_an_object.err and "Usage:" in not_an_object.err


def test_enqueue_with_a_bad_queue_name_is_a_usage_error(tasks: App, shop: Path, db: Any) -> None:
    """Like every other bad option of enqueue: exit 2 with the usage, nothing written."""
    named, raw = run_all(
        tasks,
        ["enqueue", "shop:app", "shop.send_receipt", "--payload", '{"order_id": 1}', "--queue",
         "mail box"],
        ["enqueue", "--raw", "billing.charge", "--queue", "qé"],
        cwd=shop,
    )  # fmt: skip
    for result in (named, raw):
        assert result.code == 2, result
        assert "invalid queue name" in result.err and "Usage:" in result.err, result
    assert db.execute(f"SELECT count(*) FROM {jobs_table(tasks)}").fetchone() == (0,)


def test_key_limit_sets_and_removes_the_limits_of_a_key(tasks: App) -> None:
    app = tasks
    both, bad_rate, bad_running = run_all(
        app,
        ["key-limit", "token:42", "--running", "2", "--rate", "10/s"],
        ["key-limit", "token:43", "--rate", "fast"],
        ["key-limit", "token:44", "--running", "0"],
    )
    assert both.code == 0, both
    assert both.out.strip() == "key token:42: at most 2 running jobs, at most 10 starts per 1s"
    assert bad_rate.code == 2 and "N/s" in bad_rate.err, bad_rate
    assert bad_running.code == 2 and "--running" in bad_running.err, bad_running
    assert app.sync_client.key_limits() == {
        "token:42": {"concurrency": 2, "rate": 10, "period": 1.0}
    }
    off = run(app, "key-limit", "token:42")
    assert off.code == 0 and off.out.strip() == "key token:42: no limits"
    assert app.sync_client.key_limits() == {}
