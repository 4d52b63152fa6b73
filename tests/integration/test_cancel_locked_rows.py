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

from polling import wait_for
from skiplock import App, JobContext, JobStatus, Worker

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


@pytest.mark.parametrize(("locked_for", "answer"), [(0.1, "requested"), (1.5, "held")])
def test_a_running_leased_job_whose_row_is_locked_is_cancelled(
    app: App, locked_for: float, answer: str
) -> None:
    """Locked for a moment (a heartbeat, a write): the cancel waits and sets the flag the
    heartbeat reads.  Locked for longer: the answer is ``held`` and the worker, asked by
    NOTIFY, stops the job anyway."""
    started, seen = running_long_job(app)
    job_id = app.enqueue("long").id
    worker = Worker(app, lease_seconds=3.0, poll_interval=0.05)  # heartbeat every 1 s

    async def main() -> tuple[str, float]:
        task = asyncio.create_task(worker.run())
        try:
            assert await wait_for(started.is_set, 5.0), "the job never started"
            assert worker.listener is not None
            assert await wait_for(worker.listener.listening.is_set, 5.0)

            def cancel_while_locked() -> tuple[str, float]:
                with row_locked(app, job_id, locked_for):
                    asked = time.monotonic()
                    return app.sync_client.cancel_or_request(job_id), time.monotonic() - asked

            got, took = await asyncio.to_thread(cancel_while_locked)
            assert await wait_for(lambda: worker.stats.cancelled == 1, 5.0), worker.stats
            return got, took
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)

    got, took = asyncio.run(main())
    assert got == answer
    assert took < 1.0, f"the cancel took {took:.2f}s"
    assert seen == ["cancelled"]
    assert status_of(app, job_id) == JobStatus.CANCELLED
    assert (worker.stats.cancelled, worker.stats.done, worker.stats.lost) == (1, 0, 0)


def test_a_cancel_that_arrives_before_a_held_job_starts_is_kept_for_it(app: App) -> None:
    """The request comes (by NOTIFY, the row locked by the claim's transaction) while the
    worker records the job's start, before the job is running there: the job never runs and
    ends cancelled."""
    runs: list[int] = []

    @app.task(name="held", model="held")
    async def held() -> None:
        runs.append(1)

    job_id = held.enqueue().id
    worker = Worker(app, poll_interval=0.05)
    record_start = worker.store.job_held_start_count
    answers: list[str] = []

    async def cancel_then_record_start(conn: Any, claimed_id: int) -> int:
        assert worker.listener is not None
        assert await wait_for(worker.listener.listening.is_set, 5.0)
        answers.append(await app.async_client.cancel_or_request(claimed_id))
        assert await wait_for(lambda: len(worker._early_cancels) == 1, 5.0), "no NOTIFY came"
        return await record_start(conn, claimed_id)

    worker.store.job_held_start_count = cancel_then_record_start  # type: ignore[method-assign]

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            assert await wait_for(lambda: worker.stats.cancelled == 1, 10.0), worker.stats
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)
            await app.close_async()

    asyncio.run(main())
    assert answers == ["held"]
    assert runs == []
    assert status_of(app, job_id) == JobStatus.CANCELLED
    assert (worker.stats.cancelled, worker.stats.done) == (1, 0)
    assert len(worker._early_cancels) == 0


def test_a_cancel_request_older_than_a_held_claim_does_not_cancel_it(app: App) -> None:
    """A request that arrived before the claim was about an earlier claim of the job (or
    another worker's): the new claim runs."""
    runs: list[int] = []

    @app.task(name="held", model="held", pass_context=True)
    def held(ctx: JobContext) -> None:
        runs.append(ctx.job.id)

    job_id = held.enqueue().id
    worker = Worker(app, poll_interval=0.05, burst=True)
    worker._cancel_requested(job_id)  # as the listener would, before the job was claimed
    stats = asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert runs == [job_id]
    assert (stats.done, stats.cancelled) == (1, 0)
    assert status_of(app, job_id) == JobStatus.DONE
