"""The worker runtime end to end: real ``skiplock worker`` processes, real signals, real Postgres.

Every handler writes a row to a ledger table in the test's schema when it starts (job id and
attempt from its JobContext, the worker's pid, ``time.time()``), so what ran, how often and
where is counted from the database, independently of the jobs table.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.polling import wait_for
from skiplock import App, JobContext

pytestmark = pytest.mark.slow

WORKER_MODULE = '''
import asyncio
import os
import time

import psycopg

from skiplock import App, JobContext

DSN = os.environ["DSN"]
app = App(DSN, os.environ["SCHEMA"])
if os.environ.get("GC_THRESHOLD"):  # an app that sets its own
    import gc

    gc.set_threshold(int(os.environ["GC_THRESHOLD"]))
INSERT = (
    'INSERT INTO "{}".ledger (job_id, attempt, pid, task, started) '
    "VALUES (%s, %s, %s, %s, %s)".format(os.environ["SCHEMA"])
)
_conn = None
_lock = None


async def record(ctx: JobContext, started: float) -> None:
    """One ledger row per run, on this process's own connection (not skiplock's)."""
    global _conn, _lock
    if _lock is None:
        _lock = asyncio.Lock()
    async with _lock:
        if _conn is None:
            _conn = await psycopg.AsyncConnection.connect(
                DSN, autocommit=True, application_name="ledger"
            )
            await _conn.execute("SET synchronous_commit = off")
    await _conn.execute(
        INSERT, (ctx.job.id, ctx.job.attempts, os.getpid(), ctx.job.task, started)
    )


def record_sync(ctx: JobContext, started: float) -> None:
    with psycopg.connect(DSN, autocommit=True, application_name="ledger") as conn:
        conn.execute(INSERT, (ctx.job.id, ctx.job.attempts, os.getpid(), ctx.job.task, started))


@app.task(name="noop", pass_context=True)
async def noop(ctx: JobContext) -> None:
    await record(ctx, time.time())


@app.task(name="nap", pass_context=True)
async def nap(ctx: JobContext, seconds: float) -> None:
    await record(ctx, time.time())
    await asyncio.sleep(seconds)


@app.task(name="nap_sync", pass_context=True)
def nap_sync(ctx: JobContext, seconds: float) -> None:
    """A sync task that stops early when told to (the cooperative cancel flag)."""
    record_sync(ctx, time.time())
    ctx.cancelled.wait(seconds)


@app.task(name="hangs_if_told", pass_context=True)
async def hangs_if_told(ctx: JobContext, seconds: float) -> None:
    """Hangs in a worker process started with HANG=1, returns at once in others."""
    await record(ctx, time.time())
    if os.environ.get("HANG"):
        await asyncio.sleep(seconds)


@app.task(name="elsewhere", queue="other", pass_context=True)
async def elsewhere(ctx: JobContext) -> None:
    await record(ctx, time.time())


@app.task(name="report_gc")
def report_gc(path: str) -> None:
    import gc
    import json

    settings = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
    with open(path, "w") as f:
        json.dump(settings, f)
'''


def register_stubs(app: App) -> None:
    """The same task names on the test's side, to enqueue them."""

    @app.task(name="noop", pass_context=True)
    async def noop(ctx: JobContext) -> None: ...

    @app.task(name="nap", pass_context=True)
    async def nap(ctx: JobContext, seconds: float) -> None: ...

    @app.task(name="nap_sync", pass_context=True)
    def nap_sync(ctx: JobContext, seconds: float) -> None: ...

    @app.task(name="hangs_if_told", pass_context=True)
    async def hangs_if_told(ctx: JobContext, seconds: float) -> None: ...

    @app.task(name="elsewhere", queue="other", pass_context=True)
    async def elsewhere(ctx: JobContext) -> None: ...

    @app.task(name="report_gc")
    def report_gc(path: str) -> None: ...


@pytest.fixture
def workdir(tmp_path: Path, app: App, db: psycopg.Connection[Any]) -> Path:
    (tmp_path / "runtimemod.py").write_text(textwrap.dedent(WORKER_MODULE))
    register_stubs(app)
    db.execute(
        sql.SQL(
            "CREATE UNLOGGED TABLE {} (job_id bigint NOT NULL, attempt int NOT NULL, "
            "pid int NOT NULL, task text NOT NULL, started float8 NOT NULL)"
        ).format(sql.Identifier(app.schema, "ledger"))
    )
    return tmp_path


# -- helpers -------------------------------------------------------------------------------


class Proc:
    def __init__(self, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.popen = popen
        self.log = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def terminate_and_wait(self, timeout: float = 30) -> tuple[int, float]:
        """SIGTERM; returns (exit status, seconds it took to exit)."""
        started = time.monotonic()
        self.popen.send_signal(signal.SIGTERM)
        code = self.popen.wait(timeout=timeout)
        return code, time.monotonic() - started


def clean_env(app: App, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    env.update(DSN=app.dsn, SCHEMA=app.schema, **extra)
    return env


@contextmanager
def worker(
    workdir: Path, app: App, *args: str, name: str = "w", env: dict[str, str] | None = None
) -> Iterator[Proc]:
    """``python -m skiplock worker runtimemod:app --dsn ...`` in its own process group, which
    is killed on the way out whatever happens (a supervisor's children with it)."""
    log = workdir / f"{name}.stderr"
    # debug: the tests read the per-job event lines, which are DEBUG for jobs that went well
    command = [sys.executable, "-m", "skiplock", "worker", "runtimemod:app", "--dsn", app.dsn,
               "--log-level", "debug"]  # fmt: skip
    with log.open("wb") as err:
        popen = subprocess.Popen(
            [*command, *args],
            cwd=workdir,
            env=clean_env(app, **(env or {})),
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    try:
        yield Proc(popen, log)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(timeout=30)


def cli(app: App, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *args, "--dsn", app.dsn, "--schema", app.schema],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=clean_env(app),
    )


def ledger(db: psycopg.Connection[Any], app: App) -> list[tuple[int, int, int, str, float]]:
    """(job_id, attempt, pid, task, started) of every run so far, in the order they started."""
    return db.execute(
        sql.SQL("SELECT job_id, attempt, pid, task, started FROM {} ORDER BY started").format(
            sql.Identifier(app.schema, "ledger")
        )
    ).fetchall()


def ledger_count(db: psycopg.Connection[Any], app: App) -> int:
    row = db.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(app.schema, "ledger"))
    ).fetchone()
    assert row is not None
    return int(row[0])


def statuses(db: psycopg.Connection[Any], app: App) -> dict[int, tuple[str, int]]:
    """id -> (status, attempts) of every job."""
    rows = db.execute(
        sql.SQL("SELECT id, status, attempts FROM {}").format(sql.Identifier(app.schema, "jobs"))
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def status_counts(db: psycopg.Connection[Any], app: App) -> dict[str, int]:
    rows = db.execute(
        sql.SQL("SELECT status, count(*) FROM {} GROUP BY status").format(
            sql.Identifier(app.schema, "jobs")
        )
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def listeners(db: psycopg.Connection[Any], app: App) -> list[int]:
    """Backend pids of the LISTEN connections of workers on this test's schema."""
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'skiplock-listener' "
        # The last statement was the LISTEN, the worker's idle mark (a transaction: then it
        # holds the mark's locks) or the release of the mark.
        "AND ((query ILIKE 'listen%%' OR query ILIKE '%%/* listener of %%') "
        "AND strpos(query, %s) > 0 OR pid IN (SELECT pid FROM pg_locks WHERE "
        "locktype = 'advisory' AND classid = hashtext(%s)::oid)) ORDER BY backend_start",
        (f'"skiplock.{app.schema}"', f"skiplock_idle/skiplock.{app.schema}"),
    ).fetchall()
    return [r[0] for r in rows]


def finished_lines(text: str) -> list[tuple[int, str]]:
    """(job id, outcome) of each ``event=finished`` log line."""
    return [
        (int(m[1]), m[2])
        for m in re.finditer(r"event=finished job_id=(\d+) .*?outcome=(\w+)", text)
    ]


def command_line(pid: int) -> list[bytes]:
    """The arguments of process ``pid`` (empty when it has gone, or has not exec'd yet)."""
    try:
        data = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return data.split(b"\0") if data else []


def child_pids(parent: int) -> set[int]:
    """Live (not zombie) processes whose parent is ``parent``, from /proc."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z":
            found.add(int(entry))
    return found


# -- 1. throughput and exactly-once --------------------------------------------------------


def test_three_workers_drain_20000_jobs_each_run_exactly_once(
    workdir: Path, app: App, db: psycopg.Connection[Any]
) -> None:
    total = 20_000
    ids = sorted(e.id for e in app.enqueue_many("noop", [{}] * total))
    assert len(set(ids)) == total
    args = ("--concurrency", "10", "--poll-interval", "0.5")
    with (
        worker(workdir, app, *args, name="a") as a,
        worker(workdir, app, *args, name="b") as b,
        worker(workdir, app, *args, name="c") as c,
    ):
        procs = [a, b, c]

        def drained() -> bool:
            for p in procs:
                assert p.alive(), p.stderr
            return status_counts(db, app).get("done", 0) == total

        wait_for(drained, 120, "20,000 jobs to be done", step=0.2)
        for p in procs:
            code, _ = p.terminate_and_wait()
            assert code == 0, p.stderr
        logs = [p.stderr for p in procs]
        pids = {p.pid for p in procs}

    assert status_counts(db, app) == {"done": total}
    bad = db.execute(
        sql.SQL(
            "SELECT count(*) FROM {} WHERE attempts <> 1 OR finished_at IS NULL "
            "OR locked_until IS NOT NULL"
        ).format(sql.Identifier(app.schema, "jobs"))
    ).fetchone()
    assert bad == (0,)

    runs = ledger(db, app)
    assert len(runs) == total  # every run left exactly one row ...
    assert sorted(r[0] for r in runs) == ids  # ... one per job, none twice, none missing
    assert {r[1] for r in runs} == {1}
    by_pid = Counter(r[2] for r in runs)
    assert set(by_pid) == pids, by_pid  # all three worker processes took part

    # One log line per job, all 'done', none twice across the three processes.
    logged = [entry for text in logs for entry in finished_lines(text)]
    assert sorted(job_id for job_id, _ in logged) == ids
    assert {outcome for _, outcome in logged} == {"done"}


# -- 2. LISTEN wake-ups, and the listener's comeback --------------------------------------


def enqueue_and_time_start(db: psycopg.Connection[Any], app: App, timeout: float) -> float:
    """Enqueue one job; seconds from its commit until its handler started."""
    job_id = app.enqueue("noop", {}).id
    committed = time.time()

    def started() -> float | None:
        row = db.execute(
            sql.SQL("SELECT started FROM {} WHERE job_id = %s").format(
                sql.Identifier(app.schema, "ledger")
            ),
            (job_id,),
        ).fetchone()
        return None if row is None else row[0]

    start = wait_for(started, timeout, f"job {job_id} to start", step=0.002)
    wait_for(lambda: statuses(db, app)[job_id][0] == "done", 5, f"job {job_id} to finish")
    return float(start) - committed


def test_listen_wakes_an_idle_worker_and_the_listener_comes_back(
    workdir: Path, app: App, db: psycopg.Connection[Any]
) -> None:
    poll = 3.0  # long, so a start within 50 ms can only be the NOTIFY
    with worker(workdir, app, "--poll-interval", str(poll)) as w:
        first = wait_for(lambda: listeners(db, app), 15, "the worker to LISTEN")
        assert len(first) == 1, first
        time.sleep(0.3)  # let the worker's first (empty) claim pass: it is idle now

        latencies = [enqueue_and_time_start(db, app, timeout=poll + 2) for _ in range(20)]
        assert statistics.median(latencies) < 0.05, latencies

        killed = db.execute("SELECT pg_terminate_backend(%s)", (first[0],)).fetchone()
        assert killed == (True,)
        # A job enqueued at once still starts: by the poll, or by the reconnected listener.
        assert enqueue_and_time_start(db, app, timeout=poll + 2) < poll + 1.0

        again = wait_for(
            lambda: [pid for pid in listeners(db, app) if pid != first[0]],
            5,
            "a new listener connection",
        )
        assert len(again) == 1, again
        assert first[0] not in listeners(db, app)
        assert w.alive(), w.stderr
        time.sleep(0.2)
        later = [enqueue_and_time_start(db, app, timeout=poll + 2) for _ in range(5)]
        assert statistics.median(later) < 0.05, later

        code, _ = w.terminate_and_wait()
        assert code == 0, w.stderr
    assert "listener connection lost" in w.stderr
    assert "does not reach this worker" not in w.stderr  # the LISTEN probe came through
    assert status_counts(db, app) == {"done": 26}
    assert ledger_count(db, app) == 26


# -- 3. SIGTERM with jobs in flight ----------------------------------------------------------


def test_sigterm_with_20_jobs_in_flight_finishes_or_releases_them(
    workdir: Path, app: App, db: psycopg.Connection[Any]
) -> None:
    short: list[int] = []
    long: list[int] = []
    for task in ("nap", "nap_sync"):
        short += [e.id for e in app.enqueue_many(task, [{"seconds": 0.3}] * 5)]
        long += [e.id for e in app.enqueue_many(task, [{"seconds": 30}] * 5)]
    args = ("--concurrency", "20", "--shutdown-grace", "1", "--poll-interval", "0.2")
    with worker(workdir, app, *args) as w:
        wait_for(lambda: ledger_count(db, app) == 20 or not w.alive(), 15, "all 20 jobs to start")
        assert w.alive(), w.stderr
        before = statuses(db, app)
        code, took = w.terminate_and_wait()
        assert code == 0, w.stderr
    assert all(before[i] == ("running", 1) for i in long), before
    # The short ones were (at least partly) still running too when the signal came.
    assert any(before[i] == ("running", 1) for i in short), before
    # It waited the 1 s grace, not the 30 s jobs.
    assert took < 6, (took, w.stderr)

    after = statuses(db, app)
    assert [s for s, _ in after.values()].count("running") == 0, after
    assert {i: after[i] for i in short} == dict.fromkeys(short, ("done", 1))
    # Released: pending again with the attempt given back.
    assert {i: after[i] for i in long} == dict.fromkeys(long, ("pending", 0))
    unowned = db.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE locked_until IS NOT NULL").format(
            sql.Identifier(app.schema, "jobs")
        )
    ).fetchone()
    assert unowned == (0,)
    runs = Counter((r[0], r[1]) for r in ledger(db, app))
    assert runs == {(i, 1): 1 for i in short + long}  # each started exactly once

    outcomes = dict(finished_lines(w.stderr))
    assert outcomes == {**dict.fromkeys(short, "done"), **dict.fromkeys(long, "release")}


# -- 4. SIGKILL of a lease worker --------------------------------------------------------------


def test_sigkilled_lease_workers_jobs_are_reclaimed_and_run_again(
    workdir: Path, app: App, db: psycopg.Connection[Any]
) -> None:
    ids = [e.id for e in app.enqueue_many("hangs_if_told", [{"seconds": 120}] * 8)]
    args = ("--concurrency", "5", "--lease", "1", "--poll-interval", "0.2")
    with worker(workdir, app, *args, name="a", env={"HANG": "1"}) as a:
        wait_for(lambda: ledger_count(db, app) == 5 or not a.alive(), 15, "5 jobs to start")
        assert a.alive(), a.stderr
        time.sleep(0.5)  # a few heartbeats
        a.popen.send_signal(signal.SIGKILL)
        assert a.popen.wait(timeout=10) == -signal.SIGKILL
        killed_at = time.monotonic()
    in_flight = sorted({r[0] for r in ledger(db, app)})
    before = statuses(db, app)
    assert [before[i] for i in in_flight] == [("running", 1)] * 5
    untouched = sorted(set(ids) - set(in_flight))
    assert [before[i] for i in untouched] == [("pending", 0)] * 3
    time.sleep(1.2)  # the leases run out; nobody is left to reclaim them yet
    assert [statuses(db, app)[i] for i in in_flight] == [("running", 1)] * 5

    with worker(workdir, app, *args, name="b") as b:
        wait_for(
            lambda: status_counts(db, app) == {"done": 8} or not b.alive(),
            30,
            "the killed worker's jobs to be reclaimed and run",
            step=0.1,
        )
        assert b.alive(), b.stderr
        # Bounded by the old leader's ttl (10 s) + the 1 s lease + polling, with margin.
        assert time.monotonic() - killed_at < 20
        code, _ = b.terminate_and_wait()
        assert code == 0, b.stderr

    after = statuses(db, app)
    assert {i: after[i] for i in in_flight} == dict.fromkeys(in_flight, ("done", 2))
    assert {i: after[i] for i in untouched} == dict.fromkeys(untouched, ("done", 1))
    runs = sorted((r[0], r[1], r[2]) for r in ledger(db, app))
    expected = [(i, 1, a.pid) for i in in_flight] + [(i, 2, b.pid) for i in in_flight]
    expected += [(i, 1, b.pid) for i in untouched]
    assert runs == sorted(expected)
    assert "reclaimed" in b.stderr


# -- 5. the --processes supervisor -------------------------------------------------------------


def test_supervisor_restarts_a_killed_child_and_stops_on_sigterm(
    workdir: Path, app: App, db: psycopg.Connection[Any]
) -> None:
    args = ("--processes", "2", "--concurrency", "2", "--poll-interval", "0.2", "--lease", "5")
    with worker(workdir, app, *args, "--max-in-flight", "3", name="sup") as sup:
        # Two children that have their own command line: one found between its fork and its
        # exec shows its parent's or, during the exec, none (CI once read an empty one).
        def exec_done(pid: int) -> bool:
            return command_line(pid) not in ([], command_line(sup.pid))

        children = wait_for(
            lambda: (
                (len(found := child_pids(sup.pid)) == 2 and all(map(exec_done, found)) and found)
                or not sup.alive()
            ),
            15,
            "two worker processes",
        )
        assert sup.alive(), sup.stderr
        for pid in children:  # the children run with the supervisor's options
            command = command_line(pid)
            assert b"--max-in-flight" in command, command
            assert command[command.index(b"--max-in-flight") + 1] == b"3", command
        wait_for(lambda: len(listeners(db, app)) == 2, 15, "both children to LISTEN")

        batch1 = [e.id for e in app.enqueue_many("nap", [{"seconds": 0.05}] * 40)]
        wait_for(lambda: status_counts(db, app) == {"done": 40}, 20, "the first batch")
        assert {r[2] for r in ledger(db, app)} == children  # both children ran jobs

        victim, survivor = sorted(children)
        os.kill(victim, signal.SIGKILL)
        replacement = wait_for(
            lambda: child_pids(sup.pid) - {survivor, victim},
            8,
            "the supervisor to start a new child",
        )
        assert len(replacement) == 1 and victim not in child_pids(sup.pid)
        (new_child,) = replacement
        assert sup.alive(), sup.stderr
        assert re.search(rf"pid {victim}\) exited with status -9; restarting", sup.stderr)
        wait_for(lambda: len(listeners(db, app)) == 2, 15, "the new child to LISTEN")

        batch2 = [e.id for e in app.enqueue_many("nap", [{"seconds": 0.05}] * 40)]
        wait_for(lambda: status_counts(db, app) == {"done": 80}, 20, "the second batch")
        ran_batch2 = {r[2] for r in ledger(db, app) if r[0] in set(batch2)}
        assert ran_batch2 == {survivor, new_child}

        code, took = sup.terminate_and_wait()
        assert code == 0, sup.stderr
        assert took < 15
        assert child_pids(sup.pid) == set()
        for pid in (survivor, new_child):
            assert not Path(f"/proc/{pid}").exists(), pid
    assert "all worker processes stopped (exit statuses [0, 0])" in sup.stderr
    runs = ledger(db, app)
    assert sorted(r[0] for r in runs) == sorted(batch1 + batch2)  # each job ran once
    assert status_counts(db, app) == {"done": 80}


def test_supervisor_shuts_down_gracefully_on_ctrl_c_to_its_process_group(
    workdir: Path, app: App, db: psycopg.Connection[Any]
) -> None:
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the supervisor
    and its children alike.  That is one request to stop, so running jobs get their grace."""
    args = ("--processes", "2", "--concurrency", "4", "--poll-interval", "0.2")
    with worker(workdir, app, *args, "--shutdown-grace", "10", name="sup") as sup:
        wait_for(lambda: len(child_pids(sup.pid)) == 2 or not sup.alive(), 15, "two children")
        wait_for(lambda: len(listeners(db, app)) == 2, 15, "both children to LISTEN")
        ids = [e.id for e in app.enqueue_many("nap", [{"seconds": 1.0}] * 4)]
        wait_for(lambda: ledger_count(db, app) == 4, 10, "the jobs to start")
        os.killpg(sup.pid, signal.SIGINT)  # the supervisor was started as a group leader
        code = sup.popen.wait(timeout=30)
    assert "exiting now" not in sup.stderr, sup.stderr
    assert code == 0, sup.stderr
    after = statuses(db, app)
    assert {i: after[i] for i in ids} == dict.fromkeys(ids, ("done", 1)), after


# -- 6. pause / resume from the CLI ------------------------------------------------------------


def test_paused_queue_is_not_claimed_until_resumed(
    workdir: Path, app: App, db: psycopg.Connection[Any]
) -> None:
    with worker(workdir, app, "--poll-interval", "0.2") as w:
        wait_for(lambda: listeners(db, app), 15, "the worker to LISTEN")
        paused = cli(app, "pause", "default")
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout.strip() == "queue default paused"
        # Workers take a pause into account within one poll interval (0.2 s; 1 s of margin).
        wait_for(lambda: "paused queues: default" in w.stderr, 1.2, "the worker to see the pause")

        held_back = [e.id for e in app.enqueue_many("noop", [{}] * 5)]
        enqueued_at = time.monotonic()
        other = app.enqueue("elsewhere", {}).id  # another queue: still served
        wait_for(lambda: statuses(db, app)[other][0] == "done", 5, "the other queue's job")
        time.sleep(max(0.0, enqueued_at + 1.0 - time.monotonic()))
        assert [r[0] for r in ledger(db, app)] == [other]
        now = statuses(db, app)
        assert [now[i] for i in held_back] == [("pending", 0)] * 5

        resumed = cli(app, "resume", "default")
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "queue default resumed"
        wait_for(lambda: status_counts(db, app) == {"done": 6}, 5, "the queue to run again")
        code, _ = w.terminate_and_wait()
        assert code == 0, w.stderr
    assert sorted(r[0] for r in ledger(db, app)) == sorted([*held_back, other])


def test_the_worker_process_freezes_its_startup_objects_and_collects_young_ones_less_often(
    workdir: Path, app: App
) -> None:
    report = workdir / "gc.json"
    with worker(workdir, app, "--poll-interval", "0.2") as w:
        app.enqueue("report_gc", {"path": str(report)})
        wait_for(report.exists, 15, "the task to report")
        code, _ = w.terminate_and_wait()
        assert code == 0, w.stderr
    settings = json.loads(report.read_text())
    assert settings["threshold"][0] == 10_000  # Python's default is 700
    assert settings["frozen"] > 10_000  # modules and the app, loaded before the worker started

    # An app module that sets a threshold of its own keeps it.
    report.unlink()
    with worker(workdir, app, "--poll-interval", "0.2", env={"GC_THRESHOLD": "5000"}) as w:
        app.enqueue("report_gc", {"path": str(report)})
        wait_for(report.exists, 15, "the task to report")
        code, _ = w.terminate_and_wait()
        assert code == 0, w.stderr
    assert json.loads(report.read_text())["threshold"][0] == 5000


def test_supervisor_stopped_while_its_children_start_exits_0(
    workdir: Path, app: App, db: psycopg.Connection[Any]
) -> None:
    """A child still importing when the SIGTERM comes dies of it (its handler is not set up
    yet); it had claimed nothing, so that is a clean stop, not a failure."""
    with worker(workdir, app, "--processes", "2", name="sup") as sup:
        wait_for(lambda: len(child_pids(sup.pid)) == 2 or not sup.alive(), 15, "two children")
        code, _ = sup.terminate_and_wait()  # at once: the children are still starting
        assert code == 0, sup.stderr
    assert status_counts(db, app) == {}
