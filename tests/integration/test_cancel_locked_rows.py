"""An admin's cancel of a job whose row another session has locked, with real Workers.

A claim, a heartbeat or an outcome being written holds a job's row for milliseconds: the
cancel tries again for a moment and then changes the row itself.  A held-lock job's row stays
locked while the job runs: the worker running it is asked by NOTIFY.  The worker also takes a
request that arrives between its claim of a held-lock job and the job's start, and stops a
leased job whose row stayed locked.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for_async
from skiplock import App, CancelledJobs, JobContext, JobStatus, Worker
from skiplock.bulk import JobFilter

pytestmark = pytest.mark.smoke


@contextmanager
def row_locked(app: App, job_id: int, seconds: float) -> Iterator[None]:
    """Another session locks the job's row (as a claim or a write does) for ``seconds``, from
    when the block starts; the block's end waits for the lock to go."""
    locked = threading.Event()

    def hold() -> None:
        with psycopg.connect(app.dsn) as conn:
            conn.execute(f'SELECT 1 FROM "{app.schema}".jobs WHERE id = %s FOR UPDATE', (job_id,))
            locked.set()
            time.sleep(seconds)
            conn.rollback()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(5), "could not lock the row"
        yield
    finally:
        holder.join()


def status_of(app: App, job_id: int) -> JobStatus | None:
    job = app.get_job(job_id)
    return job.status if job is not None else None


def test_a_cancel_of_a_pending_job_waits_out_a_row_locked_for_a_moment(app: App) -> None:
    @app.task(name="later")
    def later() -> None: ...

    job_id = later.enqueue().id
    with row_locked(app, job_id, 0.1):
        answer = app.sync_client.cancel_or_request(job_id)
    assert answer == "cancelled"
    assert status_of(app, job_id) == JobStatus.CANCELLED


def running_long_job(app: App) -> tuple[threading.Event, list[str]]:
    started = threading.Event()
    seen: list[str] = []

    @app.task(name="long")
    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    return started, seen


@pytest.mark.parametrize(
    ("locked_for", "listen", "answer"),
    [(0.1, True, "requested"), (1.5, False, "requested"), (4.0, True, "held")],
)
def test_a_running_leased_job_whose_row_is_locked_is_cancelled(
    app: App, locked_for: float, listen: bool, answer: str
) -> None:
    """Locked for a moment (a heartbeat, a write; or, not listening, for a while): the cancel
    waits and sets the flag the heartbeat reads.  Locked for longer than about 3 s: the answer
    is ``held``, and the worker, asked by NOTIFY, stops the job anyway."""
    started, seen = running_long_job(app)
    job_id = app.enqueue("long").id
    worker = Worker(app, lease_seconds=3.0, poll_interval=0.05, listen=listen)  # heartbeat 1 s

    async def main() -> tuple[str, float]:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(started.is_set, 5.0, "the job never started")
            if worker.listener is not None:
                await wait_for_async(worker.listener.listening.is_set, 5.0)

            def cancel_while_locked() -> tuple[str, float]:
                with row_locked(app, job_id, locked_for):
                    asked = time.monotonic()
                    return app.sync_client.cancel_or_request(job_id), time.monotonic() - asked

            got, took = await asyncio.to_thread(cancel_while_locked)
            await wait_for_async(lambda: worker.stats.cancelled == 1, 5.0, lambda: worker.stats)
            return got, took
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)

    got, took = asyncio.run(main())
    assert got == answer
    assert took < min(locked_for, 3.2) + 0.8, f"the cancel took {took:.2f}s"
    assert seen == ["cancelled"]
    assert status_of(app, job_id) == JobStatus.CANCELLED
    assert (worker.stats.cancelled, worker.stats.done, worker.stats.lost) == (1, 0, 0)


def held_cancel_request(db: Any, app: App, job_id: int) -> tuple[int, bool] | None:
    """The job's start record: its starts, and whether it holds a cancel request."""
    row = db.execute(
        f'SELECT starts, cancel_requested_at IS NOT NULL FROM "{app.schema}".held_starts '
        "WHERE job_id = %s",
        (job_id,),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def test_a_cancel_that_arrives_before_a_held_job_starts_stops_it_at_its_start(
    app: App, db: Any
) -> None:
    """The request comes (the row locked by the claim's transaction) while the worker is about
    to record the job's start: the start reads it, and the job never runs."""
    runs: list[int] = []

    @app.task(name="held", model="held")
    async def held() -> None:
        runs.append(1)

    job_id = held.enqueue().id
    worker = Worker(app, poll_interval=0.05)
    record_start = worker.store.job_held_start_count
    answers: list[str] = []

    async def cancel_then_record_start(conn: Any, claimed_id: int) -> tuple[int, bool]:
        answers.append(await app.async_client.cancel_or_request(claimed_id))
        return await record_start(conn, claimed_id)

    worker.store.job_held_start_count = cancel_then_record_start  # type: ignore[method-assign]

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: worker.stats.cancelled == 1, 10.0, lambda: worker.stats)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)
            await app.close_async()

    asyncio.run(main())
    assert answers == ["held"]
    assert runs == []
    assert status_of(app, job_id) == JobStatus.CANCELLED
    assert (worker.stats.cancelled, worker.stats.done) == (1, 0)


def test_a_held_job_is_cancelled_by_a_worker_that_does_not_listen(app: App, db: Any) -> None:
    """--poll-only (or behind a transaction-mode pooler): no NOTIFY reaches the worker; it
    reads the recorded request within a poll interval."""
    started = threading.Event()
    seen: list[str] = []

    @app.task(name="held_long", model="held", pass_context=True)
    def held_long(ctx: JobContext) -> None:
        started.set()
        if ctx.cancelled.wait(30):
            seen.append("told")

    job_id = app.enqueue("held_long").id
    worker = Worker(app, poll_interval=0.2, listen=False)

    async def main() -> tuple[str, float]:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(started.is_set, 5.0, "the job never started")
            assert worker.listener is None
            answer = await app.async_client.cancel_or_request(job_id)
            asked = time.monotonic()
            await wait_for_async(lambda: worker.stats.cancelled == 1, 5.0, lambda: worker.stats)
            return answer, time.monotonic() - asked
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)
            await app.close_async()

    answer, took = asyncio.run(main())
    assert answer == "held"
    assert seen == ["told"]
    assert took < 2.0, f"stopped {took:.2f}s after the request (poll interval 0.2 s)"
    assert status_of(app, job_id) == JobStatus.CANCELLED
    assert (worker.stats.cancelled, worker.stats.done) == (1, 0)


def test_a_request_for_a_held_job_stopped_at_shutdown_waits_for_its_next_start(
    app: App, db: Any
) -> None:
    """The worker shuts down before it read the request (it rolls the job back, to run again):
    the request stays on the start record, and the next start of the job reads it."""
    runs: list[int] = []
    started = threading.Event()

    @app.task(name="held_long", model="held")
    async def held_long() -> None:
        runs.append(1)
        started.set()
        await asyncio.sleep(30)

    job_id = app.enqueue("held_long").id
    deaf = Worker(app, poll_interval=30.0, listen=False, shutdown_grace=0.1)

    async def first() -> str:
        task = asyncio.create_task(deaf.run())
        try:
            await wait_for_async(started.is_set, 5.0, "the job never started")
            return await app.async_client.cancel_or_request(job_id)
        finally:
            deaf.stop()
            await asyncio.wait_for(task, 15)
            await app.close_async()

    assert asyncio.run(first()) == "held"
    assert (deaf.stats.cancelled, deaf.stats.done) == (0, 0)
    assert status_of(app, job_id) == JobStatus.PENDING
    assert held_cancel_request(db, app, job_id) == (0, True)  # the start forgotten, not the request

    second = Worker(app, poll_interval=0.05, burst=True)
    stats = asyncio.run(asyncio.wait_for(second.run(), 30))
    assert runs == [1]
    assert (stats.cancelled, stats.done) == (1, 0)
    assert status_of(app, job_id) == JobStatus.CANCELLED


def test_a_request_left_from_an_earlier_state_of_the_job_does_not_cancel_it(
    app: App, db: Any
) -> None:
    """The admin's request was recorded (the row was locked), then the job's row was written
    (as an outcome or a retry writes it): the next claim is not what the admin asked about."""
    runs: list[int] = []

    @app.task(name="held", model="held", pass_context=True)
    def held(ctx: JobContext) -> None:
        runs.append(ctx.job.id)

    job_id = held.enqueue().id
    with row_locked(app, job_id, 1.5):
        assert app.sync_client.cancel_or_request(job_id) == "held"
    assert held_cancel_request(db, app, job_id) == (0, True)
    db.execute(f'UPDATE "{app.schema}".jobs SET priority = priority WHERE id = %s', (job_id,))

    stats = asyncio.run(asyncio.wait_for(Worker(app, poll_interval=0.05, burst=True).run(), 30))
    assert runs == [job_id]
    assert (stats.done, stats.cancelled) == (1, 0)
    assert status_of(app, job_id) == JobStatus.DONE


def test_a_request_on_a_row_that_was_only_locked_cancels_the_job_at_its_start(
    app: App, db: Any
) -> None:
    """The row was locked for longer than the cancel waits (by a held-lock claim, or any
    session) and nothing wrote it since: the request stands, and the job never runs."""
    runs: list[int] = []

    @app.task(name="held", model="held")
    def held() -> None:
        runs.append(1)

    job_id = held.enqueue().id
    with row_locked(app, job_id, 1.5):
        assert app.sync_client.cancel_or_request(job_id) == "held"

    stats = asyncio.run(asyncio.wait_for(Worker(app, poll_interval=0.05, burst=True).run(), 30))
    assert runs == []
    assert (stats.done, stats.cancelled) == (0, 1)
    assert status_of(app, job_id) == JobStatus.CANCELLED


@pytest.mark.parametrize("listen", [True, False])
def test_a_bulk_cancel_of_running_jobs_stops_held_lock_jobs_too(app: App, listen: bool) -> None:
    """``cancel_jobs(running=True)`` (``skiplock cancel --all --running``) skips the locked rows
    of running held-lock jobs, and asks their workers instead: at once by NOTIFY, or within a
    poll interval.  A job of another queue is left alone, and asking again counts nothing."""
    started: list[int] = []

    @app.task(name="held_long", model="held", pass_context=True)
    async def held_long(ctx: JobContext) -> None:
        started.append(ctx.job.id)
        await asyncio.sleep(30)

    mine = [app.enqueue("held_long").id for _ in range(2)]
    other = app.enqueue("held_long", queue="other").id
    worker = Worker(
        app,
        queues=["default", "other"],
        concurrency=3,
        poll_interval=30.0 if listen else 0.2,  # listening: only the NOTIFY is quick enough
        listen=listen,
        shutdown_grace=0.1,
    )

    async def main() -> tuple[Any, Any]:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: len(started) == 3, 5.0, lambda: started)
            if worker.listener is not None:
                await wait_for_async(worker.listener.listening.is_set, 5.0)
            first = await app.async_client.cancel_jobs(JobFilter(queue="default"), running=True)
            again = await app.async_client.cancel_jobs(JobFilter(queue="default"), running=True)
            await wait_for_async(lambda: worker.stats.cancelled == 2, 5.0, lambda: worker.stats)
            return first, again
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)
            await app.close_async()

    first, again = asyncio.run(main())
    assert first == CancelledJobs(0, requested=2)
    assert again == CancelledJobs(0, requested=0)
    assert [status_of(app, i) for i in mine] == [JobStatus.CANCELLED] * 2
    assert status_of(app, other) == JobStatus.PENDING  # rolled back at shutdown, to run again
    assert (worker.stats.cancelled, worker.stats.done) == (2, 0)
