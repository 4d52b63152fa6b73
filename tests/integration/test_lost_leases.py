"""A leasing worker stops a job it is running once it knows the job's lease is gone: a heartbeat
found the claim reclaimed (another worker may be running the job already), or the worker itself
claimed the job again (its lease had run out while it ran).  Left running, the job would run
twice at once, and nothing it did could be recorded.  An async task is cancelled where it
awaits; a sync task sees ``ctx.cancelled``.  A real Worker on a real server.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for_async
from helpers.stores import sync_store
from helpers.worker_faults import failing_calls, failing_heartbeats
from skiplock import App, Worker


def steal(app: App, job_id: int) -> None:
    """Expire the job's lease, reclaim it and claim it as worker "thief", in one transaction:
    what another worker does once the lease has run out."""
    with psycopg.connect(app.dsn) as conn:
        conn.execute(f'UPDATE "{app.schema}".jobs SET locked_until = now() - '
                     "interval '1 s' WHERE id = %s", (job_id,))  # fmt: skip
        store = sync_store(app)
        store.job_reclaim_expired(conn)
        taken = store.job_claim(conn, ["default"], 1, "thief", 30)
        assert [j.id for j in taken] == [job_id]


def forget(app: App, job_id: int) -> None:
    """Put the job's row back as it was before its claim: what a server crash does to a claim
    committed without waiting for its WAL flush."""
    with psycopg.connect(app.dsn) as conn:
        conn.execute(
            f'UPDATE "{app.schema}".jobs SET status = %s, attempts = 0, locked_by = NULL, '
            "locked_at = NULL, locked_until = NULL WHERE id = %s",
            ("pending", job_id),
        )


def leasing_worker(app: App, concurrency: int = 1) -> Worker:
    return Worker(app, concurrency=concurrency, prefetch=0, lease_seconds=1.0,
                  poll_interval=0.1, listen=False)  # fmt: skip


def test_a_running_async_job_whose_lease_was_reclaimed_is_cancelled(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    seen: dict[str, Any] = {"cancelled": False, "cleaned_up": False, "after": []}
    started = asyncio.Event()

    @app.task(name="long")
    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            # Its clean-up outlasts two more heartbeats: they must not cancel it again.
            await asyncio.sleep(0.8)
            seen["cleaned_up"] = True
            raise

    @app.task(name="after")
    async def after() -> None:
        seen["after"].append(1)

    async def main() -> tuple[int, Worker]:
        job_id = long.enqueue().id
        worker = leasing_worker(app)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 15)
        await asyncio.to_thread(steal, app, job_id)
        # The next heartbeat (every lease / 3) finds the claim gone and stops the job; its
        # release is refused and counted lost.
        await wait_for_async(lambda: seen["cancelled"] and worker.stats.lost == 1, 10, lambda: seen)
        assert seen["cleaned_up"]
        after.enqueue()  # the slot it ran in is free again
        await wait_for_async(lambda: seen["after"] == [1], 10, lambda: seen)
        worker.stop()
        await asyncio.wait_for(running, 15)
        return job_id, worker

    with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
        job_id, worker = asyncio.run(main())
    assert f"job {job_id} attempt 1: lease lost (reclaimed)" in caplog.text
    assert caplog.text.count("stopping it") == 1 and caplog.text.count("lease lost") == 1
    assert worker.stats.lost == 1 and worker.stats.done == 1
    job = app.get_job(job_id)  # the thief's claim is untouched
    assert job is not None and (job.status, job.locked_by, job.attempts) == ("running", "thief", 2)


def test_a_running_sync_job_whose_lease_was_reclaimed_is_told_through_ctx_cancelled(
    app: App,
) -> None:
    started = threading.Event()
    seen: dict[str, float | None] = {"told_after": None}

    @app.task(name="loop", pass_context=True)
    def loop(ctx: Any) -> None:
        started.set()
        begun = time.monotonic()
        while time.monotonic() - begun < 30:
            if ctx.cancelled.wait(0.05):
                seen["told_after"] = time.monotonic() - begun
                return

    async def main() -> tuple[int, Worker]:
        job_id = loop.enqueue().id
        worker = leasing_worker(app)
        running = asyncio.create_task(worker.run())
        assert await asyncio.to_thread(started.wait, 15)
        await asyncio.to_thread(steal, app, job_id)
        await wait_for_async(lambda: seen["told_after"] is not None, 10, lambda: seen)
        await wait_for_async(lambda: worker.stats.lost == 1, 10)
        worker.stop()
        await asyncio.wait_for(running, 15)
        return job_id, worker

    job_id, worker = asyncio.run(main())
    assert worker.stats.lost == 1 and worker.stats.done == 0
    job = app.get_job(job_id)
    assert job is not None and (job.status, job.locked_by) == ("running", "thief")


def test_a_job_this_worker_claims_again_stops_its_earlier_run_and_keeps_its_new_claim(
    app: App,
) -> None:
    """The worker's heartbeats fail past the lease while a job runs; the worker itself reclaims
    the job and claims it again (its second slot runs it).  The first run, whose claim is gone,
    is stopped once the second claim is made: it would otherwise run on next to the second.
    And the second claim stays tracked when the first run ends: dropped, no heartbeat would
    renew it, and it would be reclaimed and claimed again until its attempts were spent."""
    events: list[tuple[str, int, float]] = []  # (what, attempt, when)

    @app.task(name="slow", pass_context=True)
    async def slow(ctx: Any) -> None:
        events.append(("start", ctx.job.attempts, time.monotonic()))
        try:
            # The second run outlasts its 1 s lease four times: only heartbeats keep it.
            await asyncio.sleep(20 if ctx.job.attempts == 1 else 4.0)
        except asyncio.CancelledError:
            events.append(("cancelled", ctx.job.attempts, time.monotonic()))
            raise

    async def main() -> None:
        slow_id = slow.enqueue().id
        worker = leasing_worker(app, concurrency=2)
        reachable = failing_heartbeats(worker)
        running = asyncio.create_task(worker.run())
        await wait_for_async(lambda: any(e[:2] == ("start", 2) for e in events), 15, lambda: events)
        reachable.set()
        job = None
        for _ in range(100):
            job = await asyncio.to_thread(app.get_job, slow_id)
            if job is not None and job.status in ("done", "failed"):
                break
            await asyncio.sleep(0.1)
        worker.stop()
        await asyncio.wait_for(running, 15)
        assert job is not None and (job.status, job.attempts) == ("done", 2), (job, events)

    asyncio.run(main())
    kinds = sorted(e[:2] for e in events)
    # The first run did not sleep its 20 s out: it was cancelled when the second claim was
    # made, just before the second run started; the second ran to its end, once.
    assert kinds == [("cancelled", 1), ("start", 1), ("start", 2)], events
    second_start = next(e[2] for e in events if e[:2] == ("start", 2))
    first_cancelled = next(e[2] for e in events if e[:2] == ("cancelled", 1))
    assert abs(first_cancelled - second_start) < 0.5, events


def test_a_claim_the_server_forgot_and_this_worker_made_again_keeps_its_outcome(app: App) -> None:
    """A lease claim commits without waiting for its WAL flush, so a server crash can forget
    it: the job is pending again at the attempt before, and this same worker may claim it again
    with the same worker and attempt (at another time).  The first run is stopped and writes
    nothing (a release of it would be refused, naming the forgotten claim's time); the second
    run's outcome counts, and the job runs twice, not three times."""
    runs: list[int] = []
    cancelled: list[int] = []
    started = asyncio.Event()

    @app.task(name="once", pass_context=True)
    async def once(ctx: Any) -> None:
        runs.append(ctx.job.attempts)
        started.set()
        if len(runs) == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(ctx.job.attempts)
                raise

    async def main() -> tuple[int, Worker]:
        job_id = once.enqueue().id
        worker = leasing_worker(app, concurrency=2)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 15)
        await asyncio.to_thread(forget, app, job_id)
        await wait_for_async(
            lambda: worker.stats.done == 1 and worker.stats.lost == 1,
            10,
            lambda: (runs, worker.stats),
        )
        await asyncio.sleep(1.0)  # time for a third run, if the job were back in the queue
        worker.stop()
        await asyncio.wait_for(running, 15)
        return job_id, worker

    job_id, worker = asyncio.run(main())
    assert runs == [1, 1] and cancelled == [1], (runs, cancelled)
    assert (worker.stats.done, worker.stats.lost, worker.stats.released) == (1, 1, 0)
    job = app.get_job(job_id)
    assert job is not None and (job.status, job.attempts) == ("done", 1)


def test_an_outcome_kept_through_a_server_restart_does_not_count_for_a_new_claim(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's write of a finished job's outcome fails (the server restarts) and is kept
    to be tried again; the restart forgot the job's claim (it committed without waiting for its
    WAL flush), so the job is pending again at the attempt before, and this worker claims it
    again with the same (worker, attempt).  The kept outcome must not count: it would stand
    for the new run, whose own outcome (here a failure, to be retried) would be refused.  Its
    write names the first claim's time, which the new claim does not have."""
    runs: list[int] = []
    second_started = asyncio.Event()
    second_may_fail = asyncio.Event()

    @app.task(name="twice", pass_context=True)
    async def twice(ctx: Any) -> None:
        runs.append(ctx.job.attempts)
        if len(runs) == 2:
            second_started.set()
            await second_may_fail.wait()
            raise RuntimeError("the second run fails")

    async def main() -> tuple[int, Worker]:
        job_id = twice.enqueue().id
        worker = leasing_worker(app)
        reachable, failed_writes = failing_calls(worker, "job_finish_many")
        running = asyncio.create_task(worker.run())
        await wait_for_async(
            lambda: runs == [1] and bool(failed_writes),
            10,
            lambda: (
                runs,
                failed_writes,
            ),
        )
        await asyncio.to_thread(forget, app, job_id)
        await asyncio.wait_for(second_started.wait(), 10)  # claimed again: (worker, 1) again
        reachable.set()
        # The kept outcome's next try (a second after the last failure) is refused.
        await wait_for_async(lambda: worker.stats.lost == 1, 10, lambda: worker.stats)
        second_may_fail.set()
        await wait_for_async(lambda: worker.stats.retried == 1, 10, lambda: worker.stats)
        worker.stop()
        await asyncio.wait_for(running, 15)
        return job_id, worker

    with caplog.at_level(logging.WARNING, logger="skiplock"):
        job_id, worker = asyncio.run(main())
    assert runs == [1, 1]
    assert (worker.stats.done, worker.stats.lost, worker.stats.retried) == (0, 1, 1)
    assert f"event=finished job_id={job_id} task=twice queue=default attempt=1/5 outcome=lost" in (
        caplog.text
    )
    job = app.get_job(job_id)  # the second run's failure counted: to be retried
    assert job is not None and job.status in ("scheduled", "pending"), job
    assert job.attempts == 1 and "the second run fails" in (job.last_error or "")
