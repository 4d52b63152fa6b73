"""Many OS processes against one queue: the claim never hands a job out twice.

Every multi-process test runs real interpreters (``subprocess``) with their own connections.
A file barrier makes them start together: each process connects, reports ready, and waits for
the go file, so the claims really race instead of running one after another.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for
from helpers.stores import SyncStore
from skiplock import App, Enqueued, JobStatus
from skiplock._db.enqueue import EnqueueOptions

# One script for every multi-process scenario: argv = mode, index, sync dir.
CLIENT_SCRIPT = r"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psycopg
from psycopg import sql

from skiplock import App
from skiplock._db.store_sync import SyncStore

mode, index, sync_dir = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
dsn, schema = os.environ["DSN"], os.environ["SCHEMA"]
worker = f"proc-{index}"


def barrier() -> None:
    (sync_dir / f"ready-{index}").touch()
    deadline = time.monotonic() + 60
    while not (sync_dir / "go").exists():
        if time.monotonic() > deadline:
            sys.exit("no go signal")
        time.sleep(0.0005)


def claim_skiplock(conn: psycopg.Connection) -> list[int]:
    store = SyncStore(App(dsn, schema).queries)
    claimed: list[int] = []
    empty = 0
    turn = index
    while empty < 3:
        limit = 10 if turn % 2 else 1  # every process mixes batches of 1 and 10
        turn += 1
        jobs = store.job_claim(conn, ["bulk"], limit, worker, 300)
        assert len(jobs) <= limit
        claimed.extend(job.id for job in jobs)
        empty = 0 if jobs else empty + 1
    return claimed


def claim_racy(conn: psycopg.Connection) -> list[int]:
    # The seed's naive dequeue: read the head, then mark it running in a second statement,
    # with no lock in between and no status check in the UPDATE.
    jobs = sql.Identifier(schema, "jobs")
    select = sql.SQL(
        "SELECT id FROM {} WHERE status = 'pending' AND queue = 'racy' ORDER BY id LIMIT 1"
    ).format(jobs)
    update = sql.SQL(
        "UPDATE {} SET status = 'running', locked_by = %s, "
        "locked_until = now() + interval '5 minutes' WHERE id = %s"
    ).format(jobs)
    claimed: list[int] = []
    while True:
        row = conn.execute(select).fetchone()
        if row is None:
            return claimed
        time.sleep(0.001)
        conn.execute(update, (worker, row[0]))
        claimed.append(row[0])


def enqueue_idempotent(conn: psycopg.Connection) -> list[tuple[int, bool]]:
    app = App(dsn, schema)

    @app.task(name="idem", queue="idem")
    def idem(n: int) -> None: ...

    keyed = idem.with_options(idempotency_key="order-42")
    results = [keyed.enqueue(n=index * 100 + i, conn=conn) for i in range(20)]
    app.close()
    return [(r.id, r.deduplicated) for r in results]


with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute("SELECT 1")
    barrier()
    if mode == "claim":
        out = claim_skiplock(conn)
    elif mode == "racy":
        out = claim_racy(conn)
    elif mode == "idem":
        out = enqueue_idempotent(conn)
    else:
        sys.exit(f"unknown mode {mode}")
print(json.dumps(out))
"""

PROCESS_TIMEOUT = 120


def run_together(tmp_path: Path, app: App, mode: str, n: int) -> list[Any]:
    """Run ``n`` client processes that start at the same instant; their JSON outputs."""
    script = tmp_path / "client.py"
    script.write_text(CLIENT_SCRIPT)
    sync_dir = tmp_path / f"sync-{mode}"
    sync_dir.mkdir()
    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), mode, str(i), str(sync_dir)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    try:

        def ready() -> bool:
            if len(list(sync_dir.glob("ready-*"))) >= n:
                return True
            failed = [p for p in procs if p.poll() not in (None, 0)]
            assert not failed, failed[0].communicate()[1]
            return False

        wait_for(ready, 60, "the client processes to get ready", step=0.01)
        (sync_dir / "go").touch()
        outputs = []
        for p in procs:
            out, err = p.communicate(timeout=PROCESS_TIMEOUT)
            assert p.returncode == 0, err
            outputs.append(json.loads(out))
        return outputs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def jobs_table(app: App) -> str:
    return f'"{app.schema}".jobs'


@pytest.mark.slow
def test_eight_processes_claim_ten_thousand_jobs_each_exactly_once(
    app: App, db: Any, tmp_path: Path
) -> None:
    @app.task(name="bulk", queue="bulk")
    def bulk(i: int) -> None: ...

    enqueued = {e.id for e in bulk.enqueue_many([{"i": i} for i in range(10_000)])}
    assert len(enqueued) == 10_000

    per_process: list[list[int]] = run_together(tmp_path, app, "claim", 8)

    claimed = [job_id for ids in per_process for job_id in ids]
    duplicates = {job_id: n for job_id, n in Counter(claimed).items() if n > 1}
    assert duplicates == {}
    assert set(claimed) == enqueued
    assert len(claimed) == 10_000
    # The work really was shared out: several processes got jobs.
    assert sum(1 for ids in per_process if ids) >= 2
    # The table agrees: every job is running once (attempt 1), owned by the process that
    # reported it, and none is left pending.
    rows = db.execute(f"SELECT id, status, attempts, locked_by FROM {jobs_table(app)}").fetchall()
    owner = {job_id: f"proc-{i}" for i, ids in enumerate(per_process) for job_id in ids}
    assert {status for _, status, _, _ in rows} == {"running"}
    assert {attempts for _, _, attempts, _ in rows} == {1}
    assert {job_id: locked_by for job_id, _, _, locked_by in rows} == owner


@pytest.mark.slow
def test_the_seeds_naive_select_then_update_dequeue_hands_out_duplicates(
    app: App, db: Any, tmp_path: Path
) -> None:
    """The counter-example, run by the same harness: proves the harness can see duplicates."""

    @app.task(name="racy", queue="racy")
    def racy(i: int) -> None: ...

    enqueued = {e.id for e in racy.enqueue_many([{"i": i} for i in range(160)])}

    per_process: list[list[int]] = run_together(tmp_path, app, "racy", 8)

    claimed = [job_id for ids in per_process for job_id in ids]
    duplicates = len(claimed) - len(set(claimed))
    assert set(claimed) == enqueued
    assert duplicates > 0, "the racy dequeue should have handed some job to two processes"
    pending = db.execute(
        f"SELECT count(*) FROM {jobs_table(app)} WHERE status = 'pending'"
    ).fetchone()
    assert pending == (0,)


WORKER_MODULE = r"""
from __future__ import annotations

import json
import os
import random
import time

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])
RUN_LOG = os.environ["RUN_LOG"]


@app.task(name="keyed", queue="keyed")
def keyed(key: str, n: int) -> None:
    start = time.time()
    time.sleep(random.uniform(0.02, 0.05))
    end = time.time()
    with open(RUN_LOG, "a") as log:
        log.write(json.dumps([key, n, os.getpid(), start, end]) + "\n")
"""

RUNNING_TWICE = """
SELECT entity_key, count(*) FROM {jobs} WHERE status = 'running' AND entity_key IS NOT NULL
GROUP BY 1 HAVING count(*) > 1
"""


class RunningMonitor(threading.Thread):
    """Polls the table while workers run: per-key violations and what was running."""

    def __init__(self, dsn: str, jobs: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.jobs = jobs
        self.stop_event = threading.Event()
        self.violations: list[tuple[str, int]] = []
        self.polls = 0
        self.polls_with_running = 0
        self.max_running = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop_event.is_set():
                    self.violations += conn.execute(RUNNING_TWICE.format(jobs=self.jobs)).fetchall()
                    (running,) = conn.execute(
                        f"SELECT count(*) FROM {self.jobs} WHERE status = 'running'"
                    ).fetchone() or (0,)
                    self.polls += 1
                    self.polls_with_running += running > 0
                    self.max_running = max(self.max_running, running)
                    time.sleep(0.002)
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.mark.slow
def test_entity_key_jobs_never_run_twice_at_once_across_worker_processes(
    app: App, db: Any, tmp_path: Path
) -> None:
    @app.task(name="keyed", queue="keyed")
    def keyed(key: str, n: int) -> None: ...

    keys = [f"customer-{k}" for k in range(5)]
    (tmp_path / "keyed_tasks.py").write_text(WORKER_MODULE)
    run_log = tmp_path / "runs.jsonl"
    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema, "RUN_LOG": str(run_log)}
    monitor = RunningMonitor(app.dsn, jobs_table(app))
    monitor.start()
    command = [sys.executable, "-m", "skiplock", "worker", "keyed_tasks:app", "--dsn", app.dsn]
    # No claiming ahead: a worker then holds at most 3 of the 5 keys, so the others always
    # have keys to run (with a prefetch, one worker could reserve all five and run every job).
    command += ["--concurrency", "3", "--prefetch", "0", "--poll-interval", "0.05"]
    workers: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i in range(4):
            log = open(tmp_path / f"worker-{i}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(log)
            workers.append(
                subprocess.Popen(
                    command,
                    cwd=tmp_path,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        # The jobs come once every worker is up, so none of them drains the queue alone while
        # the others are still starting.

        def started() -> bool:
            if all("started:" in (tmp_path / f"worker-{i}.log").read_text() for i in range(4)):
                return True
            assert all(w.poll() is None for w in workers), "a worker exited early"
            return False

        wait_for(started, 60, "the workers to start")
        for n in range(200):
            key = keys[n % 5]
            keyed.with_options(entity_key=key).enqueue(key=key, n=n)

        def all_done() -> bool:
            (done,) = db.execute(
                f"SELECT count(*) FROM {jobs_table(app)} WHERE status = 'done'"
            ).fetchone()
            assert done == 200 or all(w.poll() is None for w in workers), "a worker exited early"
            return bool(done == 200)

        wait_for(all_done, 90, "all 200 jobs to be done")
    finally:
        monitor.stop_event.set()
        monitor.join(30)
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        codes = []
        for w in workers:
            try:
                codes.append(w.wait(30))
            except subprocess.TimeoutExpired:
                w.kill()
                codes.append(w.wait())
        for log in logs:
            log.close()
    assert codes == [0, 0, 0, 0], [(tmp_path / f"worker-{i}.log").read_text() for i in range(4)]

    assert monitor.error is None, monitor.error
    assert monitor.violations == []
    # The monitor could have seen a violation: it watched jobs running, several at once.
    assert monitor.polls_with_running > 0
    assert monitor.max_running >= 2

    statuses = db.execute(
        f"SELECT status, count(*), max(attempts) FROM {jobs_table(app)} GROUP BY 1"
    ).fetchall()
    assert statuses == [("done", 200, 1)]

    # What the handlers themselves saw: each job ran once, and the runs of one key never
    # overlapped in time, whichever process ran them.
    runs = [json.loads(line) for line in run_log.read_text().splitlines()]
    assert sorted(n for _, n, _, _, _ in runs) == list(range(200))
    assert len({pid for _, _, pid, _, _ in runs}) >= 2, "all jobs ran in one worker process"
    for key in keys:
        spans = sorted((start, end) for k, _, _, start, end in runs if k == key)
        assert len(spans) == 40
        for (_, end), (next_start, _) in itertools.pairwise(spans):
            assert next_start >= end, f"two jobs of {key} ran at the same time"


@pytest.mark.slow
def test_concurrent_enqueues_of_one_idempotency_key_make_one_job(
    app: App, db: Any, tmp_path: Path
) -> None:
    per_process: list[list[list[Any]]] = run_together(tmp_path, app, "idem", 6)

    results = [(job_id, dedup) for out in per_process for job_id, dedup in out]
    assert len(results) == 120
    ids = {job_id for job_id, _ in results}
    assert len(ids) == 1, f"processes got different ids: {ids}"
    # Exactly one enqueue made the job; all the others were told it already existed.
    assert sum(1 for _, dedup in results if not dedup) == 1
    rows = db.execute(
        f"SELECT id, status FROM {jobs_table(app)} WHERE idempotency_key = 'order-42'"
    ).fetchall()
    assert rows == [(ids.pop(), "pending")]
    assert db.execute(f"SELECT count(*) FROM {jobs_table(app)}").fetchone() == (1,)


def test_duplicate_idempotency_keys_within_one_batch_resolve_to_the_first(
    app: App, db: Any
) -> None:
    @app.task(name="mail", queue="mail")
    def mail(n: int) -> None: ...

    same = mail.with_options(idempotency_key="k-same").enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}])
    assert [r.deduplicated for r in same] == [False, True, True]
    assert len({r.id for r in same}) == 1

    # A mixed batch: keys A, none, A, B, none, B (one statement, per-job keys).
    keys = ["A", None, "A", "B", None, "B"]
    jobs = [
        app.build_job("mail", {"n": 10 + i}, EnqueueOptions(idempotency_key=key))
        for i, key in enumerate(keys)
    ]
    results = app.sync_client.enqueue_many(jobs)
    assert [r.deduplicated for r in results] == [False, False, True, False, False, True]
    assert results[2].id == results[0].id
    assert results[5].id == results[3].id
    assert len({results[i].id for i in (0, 1, 3, 4)}) == 4
    rows = db.execute(
        f"SELECT idempotency_key, payload->>'n' FROM {jobs_table(app)} "
        "WHERE payload->>'n' >= '10' ORDER BY id"
    ).fetchall()
    # The first job of each key was stored, with its own payload; the repeats made nothing.
    assert rows == [("A", "10"), (None, "11"), ("B", "13"), (None, "14")]
    assert db.execute(f"SELECT count(*) FROM {jobs_table(app)}").fetchone() == (5,)


def test_idempotency_key_is_free_again_once_its_job_is_done(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="charge", queue="billing")
    def charge(cents: int) -> None: ...

    keyed = charge.with_options(idempotency_key="charge-7")
    first = keyed.enqueue(cents=100)
    assert keyed.enqueue(cents=100) == Enqueued(first.id, deduplicated=True)

    with psycopg.connect(app.dsn, autocommit=True) as conn:
        (job,) = store.job_claim(conn, ["billing"], 10, "w1", 30)
        assert job.id == first.id
        # Still unfinished while running: a new enqueue is the same job.
        assert keyed.enqueue(cents=100).id == first.id
        assert store.job_finish_many(conn, [job.claim], "keep") == {first.id}
    finished = app.get_job(first.id)
    assert finished is not None and finished.status is JobStatus.DONE

    second = keyed.enqueue(cents=200)
    assert second.id != first.id and not second.deduplicated
    rows = db.execute(
        f"SELECT id, status, payload->>'cents' FROM {jobs_table(app)} "
        "WHERE idempotency_key = 'charge-7' ORDER BY id"
    ).fetchall()
    assert rows == [(first.id, "done", "100"), (second.id, "pending", "200")]
    assert keyed.enqueue(cents=300) == Enqueued(second.id, deduplicated=True)
