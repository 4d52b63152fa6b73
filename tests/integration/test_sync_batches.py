"""Sync tasks whose outcomes come back in batches, with a real Worker on a real server: a worker
stopped while a batch of sync jobs runs loses none of them, and a slow sync job among quick ones
times out alone while the quick ones go on (docs/design.md, "Sync tasks in batches")."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from helpers.polling import wait_for_async
from helpers.worker_runs import run_until
from skiplock import App, JobContext, JobEvent, Worker


def statuses(db: Any, app: App) -> dict[str, int]:
    return dict(
        db.execute(f'SELECT status, count(*) FROM "{app.schema}".jobs GROUP BY status').fetchall()
    )


SYNC_RUN, STOP_WAIT = 30.0, 15.0  # seconds: each run's bound, and its stop's


def last_error(db: Any, app: App, job_id: int) -> str:
    (error,) = db.execute(
        f'SELECT last_error FROM "{app.schema}".jobs WHERE id = %s', [job_id]
    ).fetchone()
    return str(error)


def claims_ahead(worker: Worker) -> None:
    """The worker's first claim takes every job at once (some reserved beyond the slots), as
    a worker that has been draining for a while does: as if it had just run a thousand jobs."""
    worker.capacity.throughput.window = 60.0
    worker.capacity.throughput.add(1000)


def test_a_worker_stopped_mid_batch_loses_no_sync_job(app: App, db: Any) -> None:
    """Stopped while thousands of quick sync jobs drain: every job that ran is recorded done
    (once), every other is back to pending with its attempt unspent; none is left running."""
    ran: list[int] = []
    lock = threading.Lock()

    @app.task(name="quick")
    def quick(n: int) -> None:
        with lock:
            ran.append(n)

    quick.enqueue_many([{"n": n} for n in range(3000)])
    worker = Worker(app, concurrency=10, poll_interval=0.05)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(ran) >= 300, 30.0, lambda: worker.stats)
        worker.stop()
        await asyncio.wait_for(task, 30)

    asyncio.run(main())
    rows = statuses(db, app)
    assert "running" not in rows, rows
    assert rows.get("done", 0) == len(ran) == len(set(ran)), (rows, len(ran))
    assert rows.get("done", 0) + rows.get("pending", 0) == 3000, rows
    assert rows.get("pending", 0) > 0, "the worker drained everything before it was stopped"
    (spent,) = db.execute(
        f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE status = 'pending' AND attempts <> 0"
    ).fetchone()
    assert spent == 0
    assert worker.stats.done == len(ran)


def test_a_slow_sync_job_among_quick_ones_times_out_alone(app: App, db: Any) -> None:
    """After many quick sync jobs (the threads take them as quick), one that blocks past its
    timeout sees ``ctx.cancelled``, fails alone, and the quick jobs queued with it run."""
    release = threading.Event()
    seen: list[bool] = []

    @app.task(name="quick")
    def quick(n: int) -> None:
        pass

    @app.task(name="slow", timeout=0.3, max_attempts=1, pass_context=True)
    def slow(ctx: JobContext) -> None:
        seen.append(ctx.cancelled.wait(10))
        release.wait(10)

    quick.enqueue_many([{"n": n} for n in range(500)])
    slow_id = slow.with_options(priority=-1).enqueue().id  # after the first quick ones
    quick.with_options(priority=-2).enqueue_many([{"n": n} for n in range(500, 1000)])
    worker = Worker(app, concurrency=4, poll_interval=0.05)

    run_until(
        worker,
        lambda: worker.stats.done == 1000 and worker.stats.timed_out == 1,
        SYNC_RUN,
        then=release,
        stop_timeout=STOP_WAIT,
    )
    assert seen == [True]
    assert statuses(db, app) == {"done": 1000, "failed": 1}
    error = last_error(db, app, slow_id)
    assert "JobTimeout" in error, error


def test_a_slot_queues_its_next_sync_job_behind_the_one_it_waits_for(app: App, db: Any) -> None:
    """While sync calls are quick, a slot starts its next reserved job and queues its call
    behind the one it waits for, so a thread that returns takes it at once: the second job is
    started (its ``started`` event) while the first one's call still runs, in one slot."""
    second_started = threading.Event()
    started: list[int] = []
    seen: list[bool] = []

    def on_event(event: JobEvent) -> None:
        if event.kind == "started":
            started.append(event.job.id)
            if len(started) >= 2:
                second_started.set()

    @app.task(name="first_waits")
    def first_waits(n: int) -> None:
        seen.append(second_started.wait(10))

    first_waits.enqueue_many([{"n": 1}, {"n": 2}])
    worker = Worker(app, concurrency=1, poll_interval=0.05, on_event=on_event)
    claims_ahead(worker)

    run_until(worker, lambda: worker.stats.done == 2, SYNC_RUN, stop_timeout=STOP_WAIT)
    assert seen == [True, True]
    assert statuses(db, app) == {"done": 2}


def test_a_sync_job_queued_ahead_times_out_while_its_slot_waits_for_the_one_before(
    app: App, db: Any
) -> None:
    """A job queued behind its slot's current one (which blocks) runs in another thread; past
    its timeout it sees ``ctx.cancelled`` then, not once the blocked job before it returns, and
    it is recorded as a timeout even though it returned; a quick job that waited for a thread
    gets one (the overdue call's thread is kept, another takes its place)."""
    overdue_told = threading.Event()

    @app.task(name="blocker", store_result=True)
    def blocker() -> bool:
        return overdue_told.wait(10)

    @app.task(name="quick")
    def quick() -> None:
        pass

    @app.task(name="overdue", timeout=0.3, max_attempts=1, pass_context=True)
    def overdue(ctx: JobContext) -> None:
        ctx.cancelled.wait(10)
        overdue_told.set()

    # Claimed in this order: the blocker and the quick job take the two slots; the overdue
    # job goes behind the blocker in its slot.
    blocker_id = blocker.with_options(priority=1).enqueue().id
    quick.with_options(priority=2).enqueue()
    overdue_id = overdue.with_options(priority=3).enqueue().id
    worker = Worker(app, concurrency=2, poll_interval=0.05)
    claims_ahead(worker)

    run_until(
        worker,
        lambda: worker.stats.done == 2 and worker.stats.timed_out == 1,
        SYNC_RUN,
        then=overdue_told,
        stop_timeout=STOP_WAIT,
    )
    assert statuses(db, app) == {"done": 2, "failed": 1}
    blocked = app.get_job(blocker_id)
    assert blocked is not None
    assert blocked.result is True  # told while the blocker ran, before it gave up waiting
    error = last_error(db, app, overdue_id)
    assert "JobTimeout" in error, error


@pytest.mark.parametrize("behind_is", ["sync", "async"])
def test_a_job_cancelled_while_queued_ahead_never_runs(app: App, db: Any, behind_is: str) -> None:
    """An admin cancels a job its slot took behind its current one (which blocks, holding the
    only thread): the slot is not cancelled, the blocked job goes on and is done, and the
    cancelled one never runs, recorded cancelled.  Its call is queued when it is sync; an async
    one is only taken (started), to run when the slot gets to it."""
    go = threading.Event()
    ran: list[str] = []

    @app.task(name="blocker")
    def blocker() -> None:
        go.wait(10)
        ran.append("blocker")

    if behind_is == "sync":

        @app.task(name="behind")
        def behind() -> None:
            ran.append("behind")

    else:

        @app.task(name="behind")
        async def behind_async() -> None:
            ran.append("behind")

    blocker_id = blocker.with_options(priority=1).enqueue().id
    behind_id = app.enqueue("behind", {}, priority=2).id
    # A heartbeat every 0.2 s: it reads the cancel request if the notification came too early.
    worker = Worker(app, concurrency=1, lease_seconds=0.6, poll_interval=0.05)
    claims_ahead(worker)

    def queued_ahead() -> bool:  # taken from the reserve while the blocker runs
        running = worker.state.running.get(behind_id)
        if running is None or any(r is running for r in worker.state.reserved):
            return False
        return behind_is == "async" or running.ahead is not None

    def told() -> bool:
        running = worker.state.running.get(behind_id)
        return running is not None and running.stop_reason == "cancelled"

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(queued_ahead, 10.0, "the job was not queued ahead")
            assert app.sync_client.cancel_or_request(behind_id) == "requested"
            await wait_for_async(told, 10.0, "the worker never heard of the cancel")
            go.set()
            await wait_for_async(
                lambda: worker.stats.done == 1 and worker.stats.cancelled == 1,
                10.0,
                lambda: worker.stats,
            )
        finally:
            go.set()
            worker.stop()
            await asyncio.wait_for(task, 15)

    asyncio.run(main())
    assert ran == ["blocker"]
    blocked, cancelled = app.get_job(blocker_id), app.get_job(behind_id)
    assert blocked is not None and cancelled is not None
    assert (blocked.status, cancelled.status) == ("done", "cancelled")


def test_sync_jobs_that_sleep_a_few_milliseconds_are_queued_ahead_too(
    app: App, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sync jobs that block for a few milliseconds (I/O) are short, not quick: a slot queues its
    next job's call behind the one it waits for, so the thread returning from that one takes it
    at once (on main only calls under QUICK_CALL were, and each such job waited for the loop to
    hand it over).  Every job still runs once."""
    from skiplock._runtime.job_outcomes import OutcomeReporter

    ran: list[int] = []
    queued_ahead: list[int] = []
    start_ahead = OutcomeReporter.start_ahead

    def counting(reporter: OutcomeReporter, running: Any) -> None:
        queued_ahead.append(running.job.id)
        start_ahead(reporter, running)

    monkeypatch.setattr(OutcomeReporter, "start_ahead", counting)

    @app.task(name="io")
    def io(n: int) -> None:
        threading.Event().wait(0.005)  # a blocking call of 5 ms
        ran.append(n)

    jobs = 300
    app.enqueue_many("io", [{"n": n} for n in range(jobs)])
    worker = Worker(app, concurrency=4, poll_interval=0.2)
    claims_ahead(worker)
    run_until(worker, lambda: len(ran) == jobs, SYNC_RUN, stop_timeout=STOP_WAIT)
    assert sorted(ran) == list(range(jobs))
    assert statuses(db, app) == {"done": jobs}
    assert len(queued_ahead) > jobs // 2
