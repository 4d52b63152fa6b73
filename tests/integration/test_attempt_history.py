"""A job's attempt history (migration 0018's attempt_log) and the bounded payload search, on a
real server: what the outcome statements record, what the admin reads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

from skiplock import App, Retry
from skiplock._db.job_search import payload_filter
from skiplock.retry import FixedDelay
from skiplock.testing import drain


def test_each_failed_attempt_is_recorded_then_the_done_one_is_told_by_the_row(app: App) -> None:
    runs: list[int] = []

    @app.task(name="flaky", max_attempts=5, retry=FixedDelay(0))
    def flaky(n: int) -> None:
        runs.append(n)
        if len(runs) < 3:
            raise ValueError(f"boom {len(runs)}")

    job_id = app.enqueue("flaky", {"n": 1}).id
    drain(app, with_scheduled=True)
    job = app.sync_client.get_job(job_id)
    assert job is not None and job.status == "done"
    history = app.sync_client.attempts(job)
    assert [(h["attempt"], h["outcome"]) for h in history] == [
        (1, "retried"),
        (2, "retried"),
        (3, "done"),
    ]
    assert "ValueError: boom 1" in history[0]["error"] and "Traceback" in history[0]["error"]
    assert "boom 2" in history[1]["error"] and history[2]["error"] is None
    assert history[2]["worker"] == job.locked_by
    for entry in history:
        assert entry["worker"] and entry["started_at"] <= entry["ended_at"]


def test_a_job_that_runs_out_of_attempts_ends_failed_in_its_log(app: App) -> None:
    @app.task(name="doomed", max_attempts=2, retry=FixedDelay(0))
    def doomed() -> None:
        raise KeyError("never")

    job_id = app.enqueue("doomed", {}).id
    drain(app, with_scheduled=True)
    job = app.sync_client.get_job(job_id)
    assert job is not None and job.status == "failed"
    history = app.sync_client.attempts(job)
    assert [(h["attempt"], h["outcome"]) for h in history] == [(1, "retried"), (2, "failed")]
    # `skiplock jobs show` prints them, and gives them in its JSON.
    argv = [sys.executable, "-m", "skiplock", "jobs", "show", str(job_id), "--dsn", app.dsn,
            "--schema", app.schema]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    text = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True)
    lines = [
        line.strip() for line in text.stdout.splitlines() if line.strip().startswith("attempt ")
    ]
    assert [line.split(",")[0] for line in lines] == [
        f"attempt 1: retried by {history[0]['worker']}",
        f"attempt 2: failed by {history[1]['worker']}",
    ]
    assert all(line.endswith("KeyError: 'never'") for line in lines), lines
    shown = subprocess.run([*argv, "--json"], env=env, capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout)["attempt_history"] == history


def test_snoozes_and_archived_jobs_keep_their_history(pg_dsn: str, schema: str) -> None:
    app = App(pg_dsn, schema, completion="archive")
    try:
        snoozed: list[int] = []

        @app.task(name="patient")
        def patient() -> None:
            if not snoozed:
                snoozed.append(1)
                raise Retry(0, "later")

        job_id = app.enqueue("patient", {}).id
        drain(app, with_scheduled=True)
        job = app.sync_client.get_job(job_id)
        assert job is not None and job.status == "done"
        history = app.sync_client.attempts(job)
        outcomes = [h["outcome"] for h in history]
        assert outcomes == ["snoozed", "done"], history
        assert history[-1]["worker"] and history[-1]["started_at"]
    finally:
        app.sync_client.close()


def test_the_log_keeps_the_last_ten_attempts_and_cuts_long_errors(app: App, db: Any) -> None:
    @app.task(name="loud", max_attempts=14, retry=FixedDelay(0))
    def loud() -> None:
        raise RuntimeError("x" * 5000)

    job_id = app.enqueue("loud", {}).id
    drain(app, with_scheduled=True)
    job = app.sync_client.get_job(job_id)
    assert job is not None and job.status == "failed" and job.attempts == 14
    history = app.sync_client.attempts(job)
    assert [h["attempt"] for h in history] == list(range(5, 15))
    assert all(len(h["error"]) == 2000 for h in history)
    assert history[-1]["outcome"] == "failed"


def test_a_running_job_shows_its_current_attempt(app: App, db: Any) -> None:
    @app.task(name="slow")
    def slow() -> None: ...

    job_id = app.enqueue("slow", {}).id
    # A claim by hand, as a worker's: the row is running under worker w-1.
    store = app.sync_client.store  # a worker's claim, on a connection of our own
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        (job,) = store.job_claim(conn, ["default"], 1, "w-1", 30)
    assert job.id == job_id
    running = app.sync_client.get_job(job_id)
    assert running is not None
    (entry,) = app.sync_client.attempts(running)
    assert entry["outcome"] == "running" and entry["worker"] == "w-1"
    assert entry["ended_at"] is None and entry["started_at"]


def test_an_expired_lease_is_recorded_as_such(app: App) -> None:
    @app.task(name="lost")
    def lost() -> None: ...

    job_id = app.enqueue("lost", {}).id
    store = app.sync_client.store
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        store.job_claim(conn, ["default"], 1, "w-gone", 0.001)
        time.sleep(0.05)
        assert store.job_reclaim_expired(conn) == {job_id: "pending"}
    job = app.sync_client.get_job(job_id)
    assert job is not None
    (entry,) = app.sync_client.attempts(job)
    assert (entry["attempt"], entry["outcome"], entry["worker"]) == (1, "lease expired", "w-gone")
    assert entry["error"].startswith("lease expired: worker w-gone did not finish attempt 1")


def test_a_bad_log_written_by_hand_is_refused_by_its_bound(app: App, db: Any) -> None:
    @app.task(name="x.y")
    def xy() -> None: ...

    job_id = app.enqueue("x.y", {}).id
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_bound_attempt_log"):
        db.execute(
            f'UPDATE "{app.schema}".jobs SET attempt_log = %s::jsonb WHERE id = %s',
            (json.dumps([{}] * 11), job_id),
        )


# -- search by payload ----------------------------------------------------------------------


def test_payload_filter_reads_json_values_and_else_strings() -> None:
    assert json.loads(payload_filter("user", "42")) == {"user": 42}
    assert json.loads(payload_filter("user", "ann")) == {"user": "ann"}
    assert json.loads(payload_filter("tags", '["a"]')) == {"tags": ["a"]}
    for key, value in (("", "1"), ("k" * 201, "1"), ("k", "v" * 1001)):
        with pytest.raises(ValueError):
            payload_filter(key, value)


def test_search_finds_payload_matches_newest_first_within_its_filters(app: App) -> None:
    @app.task(name="mail.send", queue="emails")
    def send(to: str, n: int) -> None: ...

    @app.task(name="report.build", queue="reports")
    def build(to: str, n: int) -> None: ...

    ids = [app.enqueue("mail.send", {"to": f"u{i % 3}", "n": i}).id for i in range(30)]
    other = app.enqueue("report.build", {"to": "u0", "n": 99}).id
    client = app.sync_client
    found = client.search_jobs(payload_filter("to", "u0"))
    assert [j.id for j in found.jobs] == [other, *reversed(ids[0::3])]
    assert found.next_before is None and found.scanned == 31
    found = client.search_jobs(payload_filter("to", "u0"), task="mail.send")
    assert [j.id for j in found.jobs] == list(reversed(ids[0::3]))
    assert client.search_jobs(payload_filter("n", "7"), queue="emails").jobs[0].id == ids[7]
    assert client.search_jobs(payload_filter("n", '"7"')).jobs == []  # a string, not a number
    # Hostile text is a value, never SQL.
    assert client.search_jobs(payload_filter("to", "'); DROP TABLE jobs; --")).jobs == []


def test_search_reads_at_most_scan_jobs_and_says_where_to_go_on(app: App) -> None:
    @app.task(name="t.t")
    def t(k: int) -> None: ...

    ids = [app.enqueue("t.t", {"k": i % 10}).id for i in range(100)]
    client = app.sync_client
    wanted = payload_filter("k", "0")  # ids[0], ids[10], ... ids[90]
    found = client.search_jobs(wanted, scan=25)  # reads ids[99] .. ids[75]
    assert [j.id for j in found.jobs] == [ids[90], ids[80]]
    assert found.scanned == 25 and found.next_before == ids[75]
    seen = [j.id for j in found.jobs]
    while found.next_before is not None:
        found = client.search_jobs(wanted, scan=25, limit=2, before=found.next_before)
        seen += [j.id for j in found.jobs]
    assert seen == list(reversed(ids[0::10]))
    # A full page: the next search starts below its last job.
    page = client.search_jobs(wanted, limit=3)
    assert page.next_before == ids[70]
    with pytest.raises(ValueError):
        client.search_jobs(wanted, scan=0)
