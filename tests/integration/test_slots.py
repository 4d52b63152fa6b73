"""A leasing worker's slots: one asyncio task per slot runs reserved jobs one after another (not a
task per job) and parks when it may not start one, and what happens to one job there stays with
that job: its timeout, its cancellation, the event loop's other work."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from helpers.polling import wait_for_async
from skiplock import App, FixedDelay, JobContext, JobStatus, Task, Worker
from skiplock._runtime.capacity import Capacity, Throughput
from skiplock._runtime.leased_slots import LeasedSlots

pytestmark = pytest.mark.smoke


class Fast(Throughput):
    def per_second(self) -> float:
        return 100_000.0


def statuses(db: Any, app: App) -> dict[str, int]:
    rows = db.execute(f'SELECT status, count(*) FROM "{app.schema}".jobs GROUP BY 1').fetchall()
    return dict(rows)


def register_odd_jobs_fail_once(app: App) -> tuple[Task[..., Any], dict[int, int]]:
    """A task "flaky" whose odd-numbered jobs fail their first attempt (retried at once), and
    the attempts each job number has made."""
    attempts: dict[int, int] = {}

    @app.task(name="flaky", max_attempts=3, retry=FixedDelay(0))
    async def flaky(n: int) -> None:
        attempts[n] = attempts.get(n, 0) + 1
        if attempts[n] == 1 and n % 2:
            raise RuntimeError("first attempt of an odd job")

    return flaky, attempts


def test_a_slot_runs_reserved_jobs_one_after_another_in_one_task(app: App, db: Any) -> None:
    tasks: list[str] = []

    @app.task(name="note")
    async def note(n: int) -> None:
        current = asyncio.current_task()
        assert current is not None
        tasks.append(current.get_name())

    note.enqueue_many([{"n": n} for n in range(200)])
    stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, concurrency=1).run(), 30))
    assert stats.done == 200 and len(tasks) == 200
    # A task per job made 200; a slot goes on with the next reserved job in the same task, and
    # when the reserve runs out it parks until the next claim hands it a job: one task in all.
    assert len(set(tasks)) == 1, f"{len(set(tasks))} tasks ran 200 jobs in one slot"
    assert statuses(db, app) == {"done": 200}


def test_a_timeout_in_a_slot_does_not_reach_the_jobs_after_it(app: App, db: Any) -> None:
    """asyncio.timeout cancels the slot's task: the cancellation must end with the job that
    timed out, not cut the next ones short."""
    finished: list[int] = []

    @app.task(name="stuck", timeout=0.2, max_attempts=1)
    async def stuck() -> None:
        await asyncio.sleep(30)

    @app.task(name="short")
    async def short(n: int) -> None:
        await asyncio.sleep(0.002)
        await asyncio.sleep(0)
        finished.append(n)

    stuck.with_options(priority=-1).enqueue()  # claimed first, runs first in the only slot
    short.enqueue_many([{"n": n} for n in range(30)])
    worker = Worker(app, burst=True, concurrency=1)
    stats = asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert sorted(finished) == list(range(30))
    assert (stats.timed_out, stats.failed, stats.done, stats.cancelled) == (1, 1, 30, 0)
    assert statuses(db, app) == {"done": 30, "failed": 1}


def test_an_admin_cancel_stops_the_running_job_and_the_slot_runs_the_rest(
    app: App, db: Any
) -> None:
    started = threading.Event()
    finished: list[int] = []

    @app.task(name="long", pass_context=True)
    async def long(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    @app.task(name="short")
    async def short(n: int) -> None:
        await asyncio.sleep(0.001)
        finished.append(n)

    long_id = long.with_options(priority=-1).enqueue().id
    short.enqueue_many([{"n": n} for n in range(20)])
    # One slot, and room to reserve the short jobs behind the long one.
    worker = Worker(app, concurrency=1, lease_seconds=0.6, poll_interval=0.05)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(started.is_set, 5.0, "the long job never started")
            assert app.sync_client.cancel_or_request(long_id) == "requested"
            await wait_for_async(lambda: len(finished) == 20, 10.0, lambda: finished)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    job = app.get_job(long_id)
    assert job is not None and job.status == JobStatus.CANCELLED
    assert sorted(finished) == list(range(20))
    assert (worker.stats.cancelled, worker.stats.done, worker.stats.released) == (1, 20, 0)


def test_a_slot_of_jobs_that_never_await_gives_the_event_loop_turns(app: App) -> None:
    """Jobs that finish without awaiting anything would let a slot run its reserve without
    the event loop getting to anything else (claims, writes, heartbeats) until the unwritten
    outcomes reach their limit, 600 jobs later.  The busy slots yield every millisecond or so
    between them: another coroutine of the loop sees only a few jobs run between its turns."""
    ran = 0

    @app.task(name="spin")
    async def spin(n: int) -> None:
        nonlocal ran
        began = time.perf_counter()
        while time.perf_counter() - began < 0.0002:  # 0.2 ms of work without an await
            pass
        ran += 1

    spin.enqueue_many([{"n": n} for n in range(2000)])
    worker = Worker(app, burst=True, concurrency=2, prefetch=500)
    between_turns: list[int] = []

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        seen = 0
        while not task.done():
            await asyncio.sleep(0.0005)
            between_turns.append(ran - seen)
            seen = ran
        await task

    asyncio.run(asyncio.wait_for(main(), 60))
    assert worker.stats.done == 2000
    # A turn of 1 ms holds ~5 of these jobs; without turns the most was the unwritten limit.
    assert max(between_turns) < 60, sorted(between_turns)[-10:]


def test_retries_in_a_slot_are_recorded_and_run_again(app: App, db: Any) -> None:
    flaky, attempts = register_odd_jobs_fail_once(app)

    flaky.enqueue_many([{"n": n} for n in range(40)])
    stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, concurrency=2).run(), 30))
    assert statuses(db, app) == {"done": 40}
    assert (stats.done, stats.retried) == (40, 20)
    assert all(attempts[n] == (2 if n % 2 else 1) for n in range(40))


def test_a_late_stop_of_a_finished_job_does_not_reach_the_next_job_in_its_slot(
    app: App, db: Any
) -> None:
    """The heartbeat asks which jobs an admin cancelled, then stops them: a job may finish in
    between, and its slot's task has gone on to the next job.  Stopping the finished job used
    to cancel that task, and the next job died with it, its outcome never written."""
    worker = Worker(app, concurrency=1, poll_interval=0.05)
    # As if the worker had been finishing jobs fast: its first claim takes both jobs, and the
    # one slot runs them one after the other in one task.
    worker.capacity = Capacity(1, 500, throughput=Fast())
    finished_first: list[Any] = []
    slot_tasks: set[Any] = set()
    second_started = asyncio.Event()
    let_second_finish = asyncio.Event()

    @app.task(name="first", pass_context=True)
    async def first(ctx: JobContext) -> None:
        slot_tasks.add(asyncio.current_task())
        finished_first.append(worker.state.running[ctx.job.id])  # what a heartbeat holds on to

    @app.task(name="second")
    async def second() -> None:
        slot_tasks.add(asyncio.current_task())
        second_started.set()
        await let_second_finish.wait()

    first.with_options(priority=-1).enqueue()
    second_id = second.enqueue().id

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(second_started.wait(), 5)
            finished_first[0].stop("cancelled")  # late: it finished already
            await asyncio.sleep(0.05)
            let_second_finish.set()
            await wait_for_async(lambda: worker.stats.done == 2, 5.0, lambda: worker.stats)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    assert len(slot_tasks) == 1, "the two jobs did not run in one slot task"
    job = app.get_job(second_id)
    assert job is not None and job.status == JobStatus.DONE
    assert (worker.stats.done, worker.stats.cancelled, worker.stats.released) == (2, 0, 0)


def test_slots_park_while_writes_lag_and_are_reused_not_remade(app: App, db: Any) -> None:
    """A worker of short jobs stops starting them while its unwritten outcomes are over their
    limit and starts them again after each write: its slots park and are handed jobs again.
    However often that happens, the slot tasks are never more than the concurrency."""
    slots: set[Any] = set()

    @app.task(name="note")
    async def note(n: int) -> None:
        slots.add(asyncio.current_task())

    note.enqueue_many([{"n": n} for n in range(3000)])
    worker = Worker(app, burst=True, concurrency=4, prefetch=500)
    stats = asyncio.run(asyncio.wait_for(worker.run(), 60))
    assert stats.done == 3000
    assert statuses(db, app) == {"done": 3000}
    assert 1 <= len(slots) <= 4, f"{len(slots)} slot tasks for a concurrency of 4"
    assert all(slot.done() for slot in slots), "a slot outlived its worker"
    assert isinstance(worker.slots, LeasedSlots)
    assert not worker.slots.parked and not worker.state.busy


def test_a_job_stopped_after_its_hand_over_to_a_parked_slot_is_given_back_unrun(
    app: App, db: Any
) -> None:
    """A job handed to a parked slot is started, but the slot runs only at its next turn; an
    admin cancel that lands in between must not run it, and must record it cancelled."""
    ran: list[str] = []

    @app.task(name="first")
    async def first() -> None:
        ran.append("first")

    @app.task(name="second")
    async def second() -> None:
        ran.append("second")

    first.enqueue()
    worker = Worker(app, concurrency=1, poll_interval=0.05)

    def slots() -> LeasedSlots:
        assert isinstance(worker.slots, LeasedSlots)
        return worker.slots

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            parked = lambda: isinstance(worker.slots, LeasedSlots) and bool(worker.slots.parked)  # noqa: E731
            await wait_for_async(lambda: worker.stats.done == 1 and parked(), 5.0)
            (parked_slot, _) = slots().parked[0]
            # In a queue the worker does not claim from, so that only the test claims it: by
            # hand for this worker (as its claim loop would), reserved, handed to the parked
            # slot, and cancelled before the event loop lets the slot run.
            second_id = second.with_options(queue="aside").enqueue().id
            conn = await worker._pool.getconn()  # type: ignore[union-attr]
            try:
                [job] = await worker.store.job_claim(conn, ["aside"], 1, worker.worker_id, 30)
            finally:
                await worker._pool.putconn(conn)  # type: ignore[union-attr]
            assert job.id == second_id
            assert worker.reporter is not None
            running = worker.reporter.track(job, "lease")
            worker.state.reserved.append(running)
            slots().start_waiting()
            assert running.task is parked_slot and not slots().parked
            running.stop("cancelled")
            await wait_for_async(lambda: worker.stats.cancelled == 1, 5.0, lambda: worker.stats)
            assert parked_slot.done() and not worker.state.busy
            stored = app.get_job(second_id)
            assert stored is not None and stored.status == JobStatus.CANCELLED
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    assert ran == ["first"]
    assert (worker.stats.done, worker.stats.cancelled) == (1, 1)


def test_a_burst_worker_does_not_exit_while_a_retry_waits_behind_its_claim_cursor(
    app: App, db: Any
) -> None:
    """A retry written while a claim runs sits behind the keys that claim moved the cursor to;
    the burst worker's last look before exiting reads every queue from the start, whatever
    the rationing of such reads (without it, ~1 round in 15 exited with retries pending)."""
    flaky, _ = register_odd_jobs_fail_once(app)

    for round_ in range(30):
        numbers = range(round_ * 40, round_ * 40 + 40)
        flaky.enqueue_many([{"n": n} for n in numbers])
        stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, concurrency=2).run(), 30))
        assert statuses(db, app) == {"done": 40 * (round_ + 1)}, f"round {round_}"
        assert (stats.done, stats.retried) == (40, 20)


def test_the_worker_times_its_claims_for_its_reserve(app: App) -> None:
    """The reserve covers a few claims' time (docs/design.md, "The reserve covers the claim's
    round trip"): the claim loop tells the capacity what each claim took."""

    @app.task(name="noop")
    async def noop(n: int) -> None:
        pass

    for n in range(20):
        noop.enqueue(n=n)
    worker = Worker(app, concurrency=2, burst=True)
    assert worker.capacity.claim_time() is None
    stats = asyncio.run(worker.run())
    assert stats.done == 20
    took = worker.capacity.claim_time()
    assert took is not None and 0 < took < 10
