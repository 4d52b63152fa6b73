"""Jobs a worker claims ahead of its free slots (reserved) with real Workers on a real server.

Reserved jobs are leased like running ones: the heartbeat keeps them, shutdown gives them back
without spending an attempt, an admin can cancel them and a paused queue releases them before
they start.  The worker reserves as many as its recent rate says; the tests fix that number.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for_async
from helpers.worker_runs import run_until
from skiplock import App, FixedDelay, JobContext, Worker

pytestmark = pytest.mark.smoke


def rows(db: Any, app: App) -> dict[int, tuple[str, int]]:
    found = db.execute(f'SELECT id, status, attempts FROM "{app.schema}".jobs').fetchall()
    return {job_id: (status, attempts) for job_id, status, attempts in found}


def reserving(worker: Worker, ahead: int) -> Worker:
    """The worker claims ``ahead`` jobs beyond its slots, whatever its rate."""
    worker.capacity.ahead = lambda: ahead  # type: ignore[method-assign]
    return worker


def test_jobs_claimed_ahead_wait_leased_and_run_once_each(app: App, db: Any) -> None:
    started: list[int] = []
    gate = asyncio.Event()

    @app.task(name="gated")
    async def gated(n: int) -> None:
        started.append(n)
        if n == 0:
            await gate.wait()

    ids = [gated.enqueue(n=n).id for n in range(6)]
    worker = reserving(Worker(app, concurrency=1, lease_seconds=0.6, poll_interval=0.1), 5)

    async def main() -> tuple[list[int], dict[int, tuple[str, int]]]:
        run = asyncio.create_task(worker.run())
        await wait_for_async(lambda: started == [0], 5.0)
        await wait_for_async(lambda: len(worker.running_jobs) == 6, 5.0)
        during = rows(db, app)
        # Longer than two leases: only the heartbeat keeps the reserved jobs from being reclaimed.
        await asyncio.sleep(1.5)
        gate.set()
        await wait_for_async(lambda: len(started) == 6 and not worker.running_jobs, 5.0)
        worker.stop()
        await run
        return started, during

    order, during = asyncio.run(main())
    assert order == list(range(6))  # reserved jobs start in claim order
    assert all(status == "running" for status, _ in during.values())
    assert rows(db, app) == {job_id: ("done", 1) for job_id in ids}
    assert worker.stats.lost == 0 and worker.stats.done == 6


def most_running_rows(pg_dsn: str, schema: str, worker: Worker, jobs: int) -> tuple[int, Any]:
    """Run ``worker`` until ``jobs`` jobs are done while another connection counts the running
    rows as often as it can; returns the largest count seen and the worker's stats."""
    seen = [0]
    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    f"SELECT count(*) FROM \"{schema}\".jobs WHERE status = 'running'"
                ).fetchone()
                seen[0] = max(seen[0], row[0] if row else 0)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        run_until(worker, lambda: worker.stats.done >= jobs, timeout=60.0)
    finally:
        stop.set()
        sampler.join()
    return seen[0], worker.stats


@pytest.mark.parametrize(("bound", "handler"), [(None, "async"), (25, "async"), (25, "sync")])
def test_max_in_flight_bounds_the_jobs_claimed_and_unrecorded(
    app: App, db: Any, pg_dsn: str, bound: int | None, handler: str
) -> None:
    """The sync handler: its slots queue their next jobs behind the ones they wait for
    (docs/design.md, "Sync tasks in batches"), and those count within the bound too."""
    if handler == "async":

        @app.task(name="noop")
        async def noop(n: int) -> None:
            pass

    else:

        @app.task(name="noop")
        def noop_sync(n: int) -> None:
            pass

    jobs = 4000
    app.enqueue_many("noop", [{"n": n} for n in range(jobs)])
    worker = Worker(app, concurrency=10, max_in_flight=bound, poll_interval=0.1)
    most, stats = most_running_rows(pg_dsn, app.schema, worker, jobs)
    assert stats.done == jobs and stats.lost == 0
    assert rows(db, app) == {job_id: ("done", 1) for job_id in rows(db, app)}
    assert len(rows(db, app)) == jobs
    if bound is None:
        # without the bound, short jobs make the same worker claim far ahead (the control that
        # shows the sampler sees what the bound prevents)
        assert most > 25
    else:
        assert 0 < most <= bound


def test_shutdown_gives_reserved_jobs_back_without_spending_their_attempt(
    app: App, db: Any
) -> None:
    started: list[int] = []

    @app.task(name="slow")
    async def slow(n: int) -> None:
        started.append(n)
        await asyncio.sleep(0.3)

    ids = [slow.enqueue(n=n).id for n in range(5)]
    worker = reserving(Worker(app, concurrency=1, shutdown_grace=2.0, poll_interval=0.1), 4)

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(worker.running_jobs) == 5, 5.0)
        worker.stop()
        await run

    asyncio.run(main())
    assert started == [0]
    after = rows(db, app)
    assert after[ids[0]] == ("done", 1)
    assert {after[i] for i in ids[1:]} == {("pending", 0)}
    assert worker.stats.released == 4


def test_admin_cancel_of_a_reserved_job_cancels_it_before_it_starts(app: App, db: Any) -> None:
    started: list[int] = []
    gate = asyncio.Event()

    @app.task(name="gated")
    async def gated(n: int) -> None:
        started.append(n)
        await gate.wait()

    ids = [gated.enqueue(n=n).id for n in range(3)]
    worker = reserving(Worker(app, concurrency=1, lease_seconds=0.6, poll_interval=0.1), 2)

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(worker.running_jobs) == 3, 5.0)
        assert await app.async_client.cancel_or_request(ids[1]) == "requested"
        # the heartbeat (every lease/3) passes the request on; then the first job finishes
        await asyncio.sleep(0.6)
        gate.set()
        await wait_for_async(lambda: not worker.running_jobs, 5.0)
        worker.stop()
        await run

    asyncio.run(main())
    assert started == [0, 2]
    assert rows(db, app) == {ids[0]: ("done", 1), ids[1]: ("cancelled", 1), ids[2]: ("done", 1)}


def test_shutdown_cancels_a_reserved_job_an_admin_cancelled_and_releases_the_rest(
    app: App, db: Any
) -> None:
    started: list[int] = []

    @app.task(name="gated")
    async def gated(n: int) -> None:
        started.append(n)
        await asyncio.Event().wait()  # until shutdown cancels it

    ids = [gated.enqueue(n=n).id for n in range(3)]
    worker = reserving(
        Worker(app, concurrency=1, lease_seconds=0.6, poll_interval=0.1, shutdown_grace=0.2), 2
    )

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(worker.running_jobs) == 3, 5.0)
        assert await app.async_client.cancel_or_request(ids[1]) == "requested"
        # the heartbeat (every lease/3) passes the request on to the reserved job
        reserved = next(r for r in worker.state.reserved if r.job.id == ids[1])
        await wait_for_async(lambda: reserved.stop_reason == "cancelled", 5.0)
        worker.stop()
        await run

    asyncio.run(main())
    assert started == [0]
    after = rows(db, app)
    # the running job was cut short by the shutdown and the untouched reserved job given back,
    # neither spending its attempt; the one an admin cancelled is cancelled, not run later
    assert after == {ids[0]: ("pending", 0), ids[1]: ("cancelled", 1), ids[2]: ("pending", 0)}


def test_pausing_the_queue_releases_reserved_jobs(app: App, db: Any) -> None:
    started: list[int] = []
    gate = asyncio.Event()

    @app.task(name="gated", queue="pausable")
    async def gated(n: int) -> None:
        started.append(n)
        await gate.wait()

    ids = [gated.enqueue(n=n).id for n in range(4)]
    worker = reserving(Worker(app, concurrency=1, poll_interval=0.1), 3)

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(worker.running_jobs) == 4, 5.0)
        await app.async_client.set_paused("pausable", True)
        assert worker.settings is not None
        await wait_for_async(lambda: "pausable" in worker.settings.paused, 5.0)  # type: ignore[union-attr]
        gate.set()
        await wait_for_async(lambda: not worker.running_jobs, 5.0)
        worker.stop()
        await run

    asyncio.run(main())
    assert started == [0]
    after = rows(db, app)
    assert after[ids[0]] == ("done", 1)
    assert {after[i] for i in ids[1:]} == {("pending", 0)}


def test_a_job_announced_during_an_empty_claim_starts_without_waiting_for_the_poll(
    app: App,
) -> None:
    started: list[float] = []

    @app.task(name="quick")
    async def quick() -> None:
        started.append(time.monotonic())

    worker = Worker(app, poll_interval=30.0)  # only a wake-up can start the job in time
    claim = worker.store.job_claim
    calls = 0
    enqueued_at = 0.0

    async def racing_claim(*args: Any, **kwargs: Any) -> Any:
        """The first claim once the listener is up and has marked the worker idle (so that
        producers notify it) finds nothing; the job is enqueued (and its NOTIFY handled)
        before that claim returns."""
        nonlocal calls, enqueued_at
        marked = worker.listener is not None and worker.listener.idle_held
        jobs = await claim(*args, **kwargs)
        if marked:
            calls += 1
        if calls == 1 and not enqueued_at:
            assert worker.claims is not None
            claims = worker.claims
            before = claims.announced
            enqueued_at = time.monotonic()
            await quick.enqueue_async()
            await wait_for_async(lambda: claims.announced > before, 5.0)
        return jobs

    worker.store.job_claim = racing_claim  # type: ignore[method-assign]

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        await wait_for_async(lambda: bool(started), 5.0, "the job waited for the poll")
        worker.stop()
        await run

    asyncio.run(main())
    assert calls >= 2 and started[0] - enqueued_at < 5.0


def test_a_claim_cut_short_by_a_queue_limit_does_not_idle_the_worker(app: App, db: Any) -> None:
    @app.task(name="nap", queue="narrow")
    async def nap() -> None:
        await asyncio.sleep(0.05)

    ids = [nap.enqueue().id for _ in range(6)]
    app.sync_client.set_concurrency_limit("narrow", 1)
    worker = Worker(app, concurrency=5, poll_interval=30.0, listen=False)

    # one at a time, each claimed as soon as the previous one's outcome is written
    run_until(worker, lambda: worker.stats.done == 6)
    assert rows(db, app) == {job_id: ("done", 1) for job_id in ids}


def test_the_next_job_of_an_entity_key_starts_when_the_running_one_ends(app: App, db: Any) -> None:
    """The claim skips jobs whose key is running, so it comes up short; the worker must still
    claim the next one of that key as soon as the running one is recorded, not at the poll."""

    @app.task(name="step", queue="keyed")
    async def step(n: int) -> None:
        await asyncio.sleep(0.05)

    ids = [step.with_options(entity_key="k").enqueue(n=n).id for n in range(3)]
    worker = Worker(app, concurrency=2, poll_interval=30.0, listen=False)

    run_until(worker, lambda: worker.stats.done == 3)
    assert rows(db, app) == {job_id: ("done", 1) for job_id in ids}


def test_a_job_retried_at_once_runs_again_without_waiting_for_the_poll(app: App, db: Any) -> None:
    attempts: list[int] = []

    @app.task(name="flaky", retry=FixedDelay(0), pass_context=True)
    async def flaky(ctx: JobContext) -> None:
        attempts.append(ctx.job.attempts)
        if ctx.job.attempts == 1:
            raise RuntimeError("first attempt fails")

    job_id = flaky.enqueue().id
    worker = Worker(app, concurrency=2, poll_interval=30.0, listen=False)

    run_until(worker, lambda: worker.stats.done == 1)
    assert attempts == [1, 2]
    assert rows(db, app) == {job_id: ("done", 2)}


def test_a_better_job_claimed_later_starts_before_the_jobs_reserved_ahead_of_it(
    app: App, db: Any
) -> None:
    """A higher-priority job of the busy queue and a job of another queue, claimed while older
    jobs wait in the reserve, start at the next free slot, not after that reserve."""
    started: list[str] = []
    gate = asyncio.Event()

    @app.task(name="backlog", queue="busy")
    async def backlog(n: int) -> None:
        started.append(f"b{n}")
        if n == 0:
            await gate.wait()
        else:
            await asyncio.sleep(0.2)

    @app.task(name="urgent", queue="busy", priority=-1)
    async def urgent() -> None:
        started.append("urgent")

    @app.task(name="other", queue="other")
    async def other() -> None:
        started.append("other")

    for n in range(8):
        backlog.enqueue(n=n)
    worker = reserving(Worker(app, queues=["busy", "other"], concurrency=1, poll_interval=0.1), 4)

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        # b0 runs, b1-b4 are reserved; the worker claims again once two of those have started
        await wait_for_async(lambda: started == ["b0"] and len(worker.running_jobs) == 5, 5.0)
        await urgent.enqueue_async()
        await other.enqueue_async()
        gate.set()
        await wait_for_async(lambda: len(started) == 10 and not worker.running_jobs, 10.0)
        worker.stop()
        await run

    asyncio.run(main())
    # Claimed after b1-b4, both start as soon as the slot frees from the job that ran when they
    # were claimed: before b3 and b4, which were reserved ahead of them.
    assert started.index("urgent") < started.index("b3")
    assert started.index("other") < started.index("b3")
