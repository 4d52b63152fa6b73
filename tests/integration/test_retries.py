"""Failures, retries, snoozes, unknown tasks and the admin operations, run by a real Worker."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime
from typing import Any

import psycopg

from helpers.stores import SyncStore
from skiplock import (
    App,
    ExponentialBackoff,
    FixedDelay,
    JobContext,
    JobStatus,
    Retry,
    Worker,
    WorkerStats,
)


def jobs_table(app: App) -> str:
    return f'"{app.schema}".jobs'


def burst(app: App, **options: Any) -> WorkerStats:
    options.setdefault("poll_interval", 0.05)
    return asyncio.run(Worker(app, burst=True, **options).run())


def drain(app: App, db: Any, timeout: float = 20.0, **options: Any) -> WorkerStats:
    """Run burst workers until no job is scheduled, pending or running; summed stats."""
    total = WorkerStats()
    deadline = time.monotonic() + timeout
    while True:
        stats = burst(app, **options)
        for name in vars(total):
            setattr(total, name, getattr(total, name) + getattr(stats, name))
        (left,) = db.execute(
            f"SELECT count(*) FROM {jobs_table(app)} "
            "WHERE status IN ('scheduled', 'pending', 'running')"
        ).fetchone()
        if left == 0:
            return total
        assert time.monotonic() < deadline, f"{left} jobs still unfinished"
        time.sleep(0.02)


def db_now(db: Any) -> datetime:
    (now,) = db.execute("SELECT clock_timestamp()").fetchone()
    assert isinstance(now, datetime)
    return now


def test_a_task_that_always_fails_ends_failed_after_max_attempts(
    app: App, store: SyncStore, db: Any
) -> None:
    calls: list[int] = []

    @app.task(name="doomed", max_attempts=3, retry=ExponentialBackoff(base=0.01, cap=0.05))
    def doomed(n: int) -> None:
        calls.append(n)
        raise ValueError(f"doomed call {len(calls)} for n={n}")

    job_id = doomed.enqueue(n=7).id
    stats = drain(app, db)
    assert calls == [7, 7, 7]
    assert (stats.claimed, stats.retried, stats.failed, stats.done) == (3, 2, 1, 0)
    job = app.get_job(job_id)
    assert job is not None
    assert job.status is JobStatus.FAILED
    assert job.attempts == 3
    assert job.finished_at is not None
    assert job.locked_until is None
    error = job.last_error or ""
    assert error.startswith("ValueError: doomed call 3 for n=7")
    assert "Traceback (most recent call last)" in error
    assert "in doomed" in error  # the frame of the task itself
    # Terminal: no claim, no promotion, no further burst touches it.
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        s = store
        assert s.job_promote_due(conn) == {}
        assert s.job_claim(conn, ["default"], 10, "w", 30) == []
    assert burst(app).claimed == 0
    assert calls == [7, 7, 7]


def test_fixed_zero_delay_retries_in_the_same_burst(app: App, db: Any) -> None:
    calls: list[int] = []

    @app.task(name="flaky", max_attempts=3, retry=FixedDelay(0))
    def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("not yet")

    job_id = flaky.enqueue().id
    stats = burst(app)
    assert (stats.claimed, stats.retried, stats.done, stats.failed) == (3, 2, 1, 0)
    job = app.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.DONE, 3)
    # The error of the last failed attempt is kept for the record.
    assert job.last_error is not None and "RuntimeError: not yet" in job.last_error


def test_backoff_pushes_run_at_into_the_jitter_band(app: App, db: Any) -> None:
    calls: list[int] = []

    @app.task(name="later", max_attempts=5, retry=ExponentialBackoff(base=30, jitter=0.25))
    def later() -> None:
        calls.append(1)
        raise OSError("remote down")

    job_id = later.enqueue().id
    t0 = db_now(db)
    stats = burst(app)
    t1 = db_now(db)
    assert (stats.claimed, stats.retried) == (1, 1)
    job = app.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.finished_at) == (JobStatus.SCHEDULED, 1, None)
    assert job.last_error is not None and job.last_error.startswith("OSError: remote down")
    # run_at = (moment of the failure, between t0 and t1) + a delay within 30 s +/- 25 %.
    earliest, latest = (job.run_at - t0).total_seconds(), (job.run_at - t1).total_seconds()
    assert earliest >= 30 * 0.75 and latest <= 30 * 1.25, (earliest, latest)

    # The next failure waits about twice as long.
    db.execute(f"UPDATE {jobs_table(app)} SET run_at = now() WHERE id = %s", (job_id,))
    t0 = db_now(db)
    stats = burst(app)
    t1 = db_now(db)
    assert (stats.claimed, stats.retried) == (1, 1)
    job = app.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.SCHEDULED, 2)
    earliest, latest = (job.run_at - t0).total_seconds(), (job.run_at - t1).total_seconds()
    assert earliest >= 60 * 0.75 and latest <= 60 * 1.25, (earliest, latest)
    assert len(calls) == 2


def test_retry_request_snoozes_without_spending_the_attempt_budget(app: App, db: Any) -> None:
    calls: list[int] = []

    @app.task(name="patient", max_attempts=1)
    def patient() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise Retry(delay=0)

    job_id = patient.enqueue().id
    stats = burst(app)
    assert len(calls) == 3
    assert (stats.snoozed, stats.done, stats.retried, stats.failed) == (2, 1, 0, 0)
    job = app.get_job(job_id)
    assert job is not None
    assert job.status is JobStatus.DONE
    assert job.attempts == 3
    assert job.last_error is None  # a snooze is not a failure


def test_retry_request_with_delay_schedules_the_job(app: App, db: Any) -> None:
    @app.task(name="sleepy", max_attempts=1)
    def sleepy() -> None:
        raise Retry(delay=45, reason="come back later")

    job_id = sleepy.enqueue().id
    t0 = db_now(db)
    stats = burst(app)
    t1 = db_now(db)
    assert (stats.snoozed, stats.failed) == (1, 0)
    job = app.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.last_error) == (JobStatus.SCHEDULED, 1, None)
    assert job.max_attempts == 2  # the budget grew so the snoozed attempt is not spent
    assert (job.run_at - t0).total_seconds() >= 45
    assert (job.run_at - t1).total_seconds() <= 45


def test_worker_survives_a_job_of_an_unknown_task(app: App, db: Any, pg_dsn: str) -> None:
    """A job of a task this worker's app does not know fails at once, not retried: no worker
    of the app could run it (deploy workers that know a task before enqueuing it)."""
    other = App(pg_dsn, app.schema)
    try:

        @other.task(name="ghost", max_attempts=2)
        def ghost() -> None: ...

        ghost_id = ghost.enqueue().id
    finally:
        other.close()

    ran: list[int] = []

    @app.task(name="known")
    def known(n: int) -> None:
        ran.append(n)

    known_id = known.enqueue(n=1).id
    stats = burst(app)
    assert ran == [1]
    assert app.get_job(known_id).status is JobStatus.DONE  # type: ignore[union-attr]
    assert (stats.claimed, stats.done, stats.retried, stats.failed) == (2, 1, 0, 1)
    job = app.get_job(ghost_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.FAILED, 1)
    assert job.finished_at is not None
    assert job.last_error is not None and "unknown task 'ghost'" in job.last_error
    assert "not retried: no task of that name is registered" in job.last_error


def test_retry_job_gives_a_failed_job_one_more_run(app: App, db: Any) -> None:
    calls: list[int] = []

    @app.task(name="second_time_lucky", max_attempts=1)
    def second_time_lucky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first time unlucky")

    job_id = second_time_lucky.enqueue().id
    assert burst(app).failed == 1
    failed = app.get_job(job_id)
    assert failed is not None and (failed.status, failed.attempts) == (JobStatus.FAILED, 1)

    assert app.retry_job(job_id) is True
    retried = app.get_job(job_id)
    assert retried is not None
    assert (retried.status, retried.attempts, retried.finished_at) == (JobStatus.PENDING, 1, None)
    assert retried.max_attempts >= 2
    assert app.retry_job(job_id) is False  # pending now: not retryable

    stats = burst(app)
    assert (stats.claimed, stats.done) == (1, 1)
    assert len(calls) == 2
    done = app.get_job(job_id)
    assert done is not None and (done.status, done.attempts) == (JobStatus.DONE, 2)
    assert app.retry_job(job_id) is False  # done: not retryable
    assert burst(app).claimed == 0
    assert len(calls) == 2


def test_retry_job_refuses_jobs_that_are_not_failed_or_cancelled(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="noop")
    def noop() -> None: ...

    pending_id = noop.enqueue().id
    scheduled_id = noop.with_options(delay=60).enqueue().id
    running_id = noop.enqueue().id
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        s = store
        # Claim exactly the third job: the first is taken and finished, leaving it done.
        first, second = s.job_claim(conn, ["default"], 2, "w", 30)
        assert {first.id, second.id} == {pending_id, running_id}
        by_id = {j.id: j for j in (first, second)}
        assert s.job_finish_many(conn, [by_id[pending_id].claim], "keep") == {pending_id}
    done_id = pending_id
    pending_id = noop.enqueue().id
    before = db.execute(f"SELECT * FROM {jobs_table(app)} ORDER BY id").fetchall()
    for job_id in (pending_id, scheduled_id, running_id, done_id, 10**12):
        assert app.retry_job(job_id) is False, job_id
    assert db.execute(f"SELECT * FROM {jobs_table(app)} ORDER BY id").fetchall() == before


def test_cancel_job_stops_jobs_that_have_not_started(app: App, store: SyncStore, db: Any) -> None:
    calls: list[str] = []

    @app.task(name="noted")
    def noted(tag: str) -> None:
        calls.append(tag)

    pending_id = noted.enqueue(tag="pending").id
    scheduled_id = noted.with_options(delay=60).enqueue(tag="scheduled").id
    assert app.cancel_job(pending_id) is True
    assert app.cancel_job(scheduled_id) is True
    for job_id in (pending_id, scheduled_id):
        job = app.get_job(job_id)
        assert job is not None
        assert job.status is JobStatus.CANCELLED
        assert job.finished_at is not None
        assert app.cancel_job(job_id) is False  # already cancelled
    # Even once its time has come, the cancelled scheduled job is not promoted nor run.
    db.execute(f"UPDATE {jobs_table(app)} SET run_at = now() WHERE id = %s", (scheduled_id,))
    control_id = noted.enqueue(tag="control").id
    stats = burst(app)
    assert calls == ["control"]
    assert stats.claimed == 1
    assert app.get_job(control_id).status is JobStatus.DONE  # type: ignore[union-attr]
    for job_id in (pending_id, scheduled_id):
        assert app.get_job(job_id).status is JobStatus.CANCELLED  # type: ignore[union-attr]

    # Started or finished jobs cannot be cancelled.
    assert app.cancel_job(control_id) is False
    running_id = noted.enqueue(tag="running").id
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        [job] = store.job_claim(conn, ["default"], 1, "w", 30)
    assert job.id == running_id
    assert app.cancel_job(running_id) is False
    assert app.get_job(running_id).status is JobStatus.RUNNING  # type: ignore[union-attr]
    assert app.get_job(control_id).status is JobStatus.DONE  # type: ignore[union-attr]


def test_cancelled_job_can_be_retried_by_an_admin(app: App, db: Any) -> None:
    calls: list[int] = []

    @app.task(name="revived")
    def revived() -> None:
        calls.append(1)

    job_id = revived.enqueue().id
    assert app.cancel_job(job_id) is True
    assert burst(app).claimed == 0
    assert app.retry_job(job_id) is True
    assert app.get_job(job_id).status is JobStatus.PENDING  # type: ignore[union-attr]
    assert burst(app).done == 1
    assert calls == [1]


def test_sync_async_and_context_tasks_all_run(app: App, db: Any) -> None:
    seen: dict[str, Any] = {}

    @app.task(name="plain_sync")
    def plain_sync(x: int) -> None:
        seen["sync"] = (x, threading.current_thread() is threading.main_thread())

    @app.task(name="plain_async")
    async def plain_async(x: int) -> None:
        seen["async"] = (x, asyncio.current_task() is not None)

    @app.task(name="ctx_sync", pass_context=True)
    def ctx_sync(ctx: JobContext, x: int) -> None:
        seen["ctx_sync"] = (ctx, x)

    @app.task(name="ctx_async", pass_context=True, max_attempts=2, retry=FixedDelay(0))
    async def ctx_async(ctx: JobContext, x: int) -> None:
        seen.setdefault("ctx_async", []).append((ctx, x))
        if ctx.job.attempts == 1:
            raise RuntimeError("once more")

    ids = {
        "sync": plain_sync.enqueue(x=1).id,
        "async": plain_async.enqueue(x=2).id,
        "ctx_sync": ctx_sync.enqueue(x=3).id,
        "ctx_async": ctx_async.enqueue(x=4).id,
    }
    worker = Worker(app, burst=True, poll_interval=0.05, concurrency=2)
    stats = asyncio.run(worker.run())
    assert (stats.done, stats.retried, stats.failed) == (4, 1, 0)
    assert seen["sync"] == (1, False)  # ran in the worker's thread pool
    assert seen["async"] == (2, True)  # ran on the event loop

    ctx, x = seen["ctx_sync"]
    assert isinstance(ctx, JobContext) and x == 3
    assert (ctx.job.id, ctx.job.attempts, ctx.job.task) == (ids["ctx_sync"], 1, "ctx_sync")
    assert ctx.job.payload == {"x": 3}
    assert ctx.worker_id == worker.worker_id
    assert ctx.conn is None  # lease model: no transaction to share

    runs = seen["ctx_async"]
    assert [(c.job.id, c.job.attempts, v) for c, v in runs] == [
        (ids["ctx_async"], 1, 4),
        (ids["ctx_async"], 2, 4),
    ]
    assert all(c.conn is None and c.worker_id == worker.worker_id for c, _ in runs)
    for job_id in ids.values():
        assert app.get_job(job_id).status is JobStatus.DONE  # type: ignore[union-attr]
