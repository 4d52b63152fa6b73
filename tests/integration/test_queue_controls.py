"""Queue pause/resume, per-queue concurrency limits, release on shutdown, retention and the
batched completer, with real Workers on a real server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from helpers.polling import comes_true_async, wait_for_async
from helpers.running_peak import RunningPeak
from skiplock import App, Worker
from skiplock.job import Claim

pytestmark = pytest.mark.smoke


def statuses(db: Any, app: App, queue: str | None = None) -> dict[str, int]:
    rows = db.execute(
        f'SELECT status, count(*) FROM "{app.schema}".jobs '
        "WHERE %(q)s::text IS NULL OR queue = %(q)s GROUP BY status",
        {"q": queue},
    ).fetchall()
    return dict(rows)


def listening(worker: Worker) -> Callable[[], bool]:
    return lambda: worker.listener is not None and worker.listener.listening.is_set()


# -- pause / resume --------------------------------------------------------------------------


def test_paused_queue_is_not_claimed_from_until_resumed(app: App, db: Any) -> None:
    ran: list[tuple[str, int]] = []

    @app.task(name="held_back", queue="pq")
    async def held_back(n: int) -> None:
        ran.append(("pq", n))

    @app.task(name="other", queue="oq")
    async def other(n: int) -> None:
        ran.append(("oq", n))

    worker = Worker(app, poll_interval=0.1)

    async def main() -> float:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(listening(worker), 5.0)
            app.sync_client.set_paused("pq", True)
            await asyncio.sleep(0.3)  # more than a poll interval: the worker has seen it
            held_back.enqueue_many([{"n": i} for i in range(5)])  # NOTIFY wakes the worker
            other.enqueue(n=0)
            await wait_for_async(lambda: ("oq", 0) in ran, 2.0, "an unpaused queue stalled")
            await asyncio.sleep(1.0)
            assert [r for r in ran if r[0] == "pq"] == [], "claimed from a paused queue"
            assert statuses(db, app, "pq") == {"pending": 5}
            app.sync_client.set_paused("pq", False)
            resumed = time.monotonic()
            await wait_for_async(lambda: len(ran) == 6, 3.0, "resume did not take effect")
            return time.monotonic() - resumed
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    took = asyncio.run(main())
    assert took < 1.0, f"jobs ran {took:.2f}s after resume (poll interval 0.1 s)"
    assert sorted(n for q, n in ran if q == "pq") == list(range(5))
    assert statuses(db, app) == {"done": 6}
    assert db.execute(f'SELECT name, paused FROM "{app.schema}".queues').fetchall() == [
        ("pq", False)
    ]


def test_queue_paused_before_the_worker_starts_is_not_claimed_from(app: App, db: Any) -> None:
    @app.task(name="waiting", queue="pq")
    def waiting() -> None: ...

    app.sync_client.set_paused("pq", True)
    waiting.enqueue_many([{}] * 3)
    stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 10))
    assert stats.claimed == 0
    assert statuses(db, app) == {"pending": 3}


def test_a_worker_idles_while_its_only_queue_is_paused(app: App) -> None:
    """A wake-up (NOTIFY) for a paused queue must not turn the claim loop into a busy loop."""

    @app.task(name="napping", queue="pq")
    async def napping() -> None: ...

    worker = Worker(app, poll_interval=0.1)

    async def main() -> float:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(listening(worker), 5.0)
            app.sync_client.set_paused("pq", True)
            await asyncio.sleep(0.3)
            napping.enqueue()  # NOTIFY for the paused queue
            cpu = time.process_time()
            await asyncio.sleep(1.0)
            return time.process_time() - cpu
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    cpu = asyncio.run(main())
    assert cpu < 0.25, f"the idle worker used {cpu:.2f}s of CPU in 1 s while its queue was paused"


def test_a_worker_with_every_slot_busy_idles_on_a_wake_up(app: App) -> None:
    """A NOTIFY while all slots are taken must not make the claim loop spin until one frees."""
    started = threading.Event()

    @app.task(name="busy", queue="bq")
    async def busy(seconds: float) -> None:
        started.set()
        await asyncio.sleep(seconds)

    worker = Worker(app, concurrency=1, poll_interval=0.1)

    async def main() -> float:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(listening(worker), 5.0)
            busy.enqueue(seconds=2.0)
            await wait_for_async(started.is_set, 3.0)
            busy.enqueue(seconds=0.0)  # NOTIFY while the only slot is busy
            cpu = time.process_time()
            await asyncio.sleep(1.0)
            return time.process_time() - cpu
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    cpu = asyncio.run(main())
    assert cpu < 0.25, f"the full worker used {cpu:.2f}s of CPU in 1 s waiting for a slot"


# -- per-queue concurrency limit -------------------------------------------------------------


def test_concurrency_limit_holds_across_workers_while_they_run(app: App, pg_dsn: str) -> None:
    app.sync_client.set_concurrency_limit("lim", 3)
    gauge = RunningPeak()

    @app.task(name="nap", queue="lim")
    async def nap() -> None:
        with gauge.running():
            await asyncio.sleep(0.05)

    nap.enqueue_many([{}] * 60)
    seen: list[int] = []
    done = threading.Event()

    def monitor() -> None:
        sql = (
            f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE status = 'running' AND queue = 'lim'"
        )
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            while not done.is_set():
                seen.append(conn.execute(sql).fetchone()[0])  # type: ignore[index]
                time.sleep(0.002)

    watcher = threading.Thread(target=monitor)
    workers = [Worker(app, concurrency=5, poll_interval=0.1, burst=True) for _ in range(3)]

    async def main() -> None:
        runs = asyncio.gather(*(w.run() for w in workers), return_exceptions=True)
        for result in await asyncio.wait_for(runs, 60):
            if isinstance(result, BaseException):
                raise result

    watcher.start()
    try:
        asyncio.run(main())
    finally:
        done.set()
        watcher.join(5)

    assert max(seen) <= 3, f"the database saw {max(seen)} running jobs of a queue limited to 3"
    assert 3 in seen, "never saw the limit reached: the check could not have failed"
    assert gauge.peak <= 3
    assert sum(w.stats.done for w in workers) == 60
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert statuses(conn, app) == {"done": 60}


def test_concurrency_limit_can_be_lifted(app: App, db: Any) -> None:
    app.sync_client.set_concurrency_limit("lim", 1)
    app.sync_client.set_concurrency_limit("lim", None)
    assert db.execute(
        f'SELECT concurrency_limit FROM "{app.schema}".queues WHERE name = %s', ("lim",)
    ).fetchone() == (None,)
    peak = 0
    now = 0

    @app.task(name="wide", queue="lim")
    async def wide() -> None:
        nonlocal peak, now
        now += 1
        peak = max(peak, now)
        await asyncio.sleep(0.1)
        now -= 1

    wide.enqueue_many([{}] * 6)
    asyncio.run(asyncio.wait_for(Worker(app, concurrency=6, burst=True).run(), 30))
    assert peak == 6


# -- per-queue rate limit ------------------------------------------------------------------


def run_until_done(app: App, workers: list[Worker], jobs: int, timeout: float = 30) -> None:
    """Run the (non-burst) workers until ``jobs`` jobs are done between them, then stop them:
    a burst worker would stop at the first claim the rate limit leaves empty."""

    async def main() -> None:
        runs = asyncio.gather(*(w.run() for w in workers))
        await comes_true_async(lambda: sum(w.stats.done for w in workers) >= jobs, timeout)
        for worker in workers:
            worker.stop()
        await asyncio.wait_for(runs, 30)

    asyncio.run(main())


def test_rate_limit_holds_across_workers(app: App, db: Any) -> None:
    # 10 starts per 0.5 s: a full bucket of 10 at once, then 20 per second.
    app.sync_client.set_rate_limit("rated", 10, 0.5)
    starts: list[float] = []

    @app.task(name="tick", queue="rated")
    async def tick(n: int) -> None:
        starts.append(time.monotonic())

    tick.enqueue_many([{"n": i} for i in range(40)])
    workers = [Worker(app, concurrency=5, poll_interval=0.05) for _ in range(2)]
    run_until_done(app, workers, 40)

    assert statuses(db, app, "rated") == {"done": 40} and len(starts) == 40
    starts.sort()
    # 30 jobs beyond the first bucket at 20 per second: at least 1.5 s (some slack for the
    # clocks of the two sides); without the limit, 40 no-op jobs take a few milliseconds.
    assert starts[-1] - starts[0] >= 1.35, starts[-1] - starts[0]
    # Never more than the bucket plus its refill in any 0.5 s window: 10 + 10.
    for i, first in enumerate(starts):
        within = sum(1 for t in starts[i:] if t - first < 0.5)
        assert within <= 20 + 1, (within, i)  # +1: the window's edges on two clocks
    assert all(w.stats.claimed > 0 for w in workers), [w.stats for w in workers]


def test_rate_limit_can_be_lifted_and_shows_in_status(app: App, db: Any) -> None:
    app.sync_client.set_rate_limit("rated", 1, 3600)  # one start an hour
    (row,) = app.sync_client.queue_status()
    assert (row["queue"], row["rate_limit"], row["rate_period"]) == ("rated", 1, 3600.0)
    ran: list[int] = []

    @app.task(name="tick", queue="rated")
    async def tick(n: int) -> None:
        ran.append(n)

    tick.enqueue_many([{"n": i} for i in range(5)])
    asyncio.run(asyncio.wait_for(Worker(app, concurrency=5, burst=True).run(), 30))
    assert len(ran) == 1  # the bucket held one start; a burst worker stops at an empty claim
    assert statuses(db, app, "rated") == {"done": 1, "pending": 4}

    app.sync_client.set_rate_limit("rated", None)
    assert db.execute(
        f'SELECT rate_limit, rate_period FROM "{app.schema}".queues WHERE name = %s', ("rated",)
    ).fetchone() == (None, None)
    asyncio.run(asyncio.wait_for(Worker(app, concurrency=5, burst=True).run(), 30))
    assert sorted(ran) == [0, 1, 2, 3, 4]


# -- graceful shutdown releases --------------------------------------------------------------


def test_stop_releases_long_jobs_without_spending_their_attempt(app: App, db: Any) -> None:
    stopping = asyncio.Event()
    cancelled: list[int] = []
    second_round = False

    @app.task(name="short")
    async def short() -> None:
        await stopping.wait()
        await asyncio.sleep(0.05)  # finishes inside the grace period

    @app.task(name="long", max_attempts=1)
    async def long(n: int) -> None:
        if second_round:
            return
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(n)
            raise

    short_ids = [e.id for e in short.enqueue_many([{}] * 2)]
    long_ids = [e.id for e in long.enqueue_many([{"n": i} for i in range(3)])]
    worker = Worker(app, concurrency=5, shutdown_grace=0.2, poll_interval=0.05)

    async def main() -> float:
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(worker.running_jobs) == 5, 5.0)
        stopping.set()
        worker.stop()
        began = time.monotonic()
        await asyncio.wait_for(task, 10)
        return time.monotonic() - began

    took = asyncio.run(main())
    assert took < 2.0, f"stop with a 0.2 s grace took {took:.2f}s"
    rows = dict(
        (i, (s, a))
        for i, s, a in db.execute(f'SELECT id, status, attempts FROM "{app.schema}".jobs')
    )
    assert {rows[i] for i in short_ids} == {("done", 1)}
    assert {rows[i] for i in long_ids} == {("pending", 0)}, rows
    assert sorted(cancelled) == [0, 1, 2]
    assert (worker.stats.released, worker.stats.done, worker.stats.failed) == (3, 2, 0)
    assert statuses(db, app).get("running", 0) == 0

    # The released jobs run again in full: their one allowed attempt was not spent.
    second_round = True
    stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    assert stats.done == 3
    assert statuses(db, app) == {"done": 5}


# -- retention and pruning -------------------------------------------------------------------


def finish(db: Any, app: App, job_id: int, status: str, age: str) -> None:
    db.execute(
        f'UPDATE "{app.schema}".jobs SET status = %s, finished_at = now() - %s::interval '
        "WHERE id = %s",
        (status, age, job_id),
    )


def test_prune_deletes_finished_jobs_past_their_retention(app: App, pg_dsn: str, db: Any) -> None:
    @app.task(name="old")
    def old() -> None: ...

    ids = [e.id for e in old.enqueue_many([{}] * 8)]
    ages = {
        ids[0]: ("done", "2 days"),
        ids[1]: ("done", "1 hour"),
        ids[2]: ("failed", "2 days"),
        ids[3]: ("failed", "8 days"),
        ids[4]: ("cancelled", "2 days"),
        ids[5]: ("cancelled", "1 hour"),
    }
    for job_id, (status, age) in ages.items():
        finish(db, app, job_id, status, age)
    # ids[6] stays pending, ids[7] too: unfinished jobs are never pruned.

    assert app.retention == {
        "done": 86400.0,
        "cancelled": 86400.0,
        "failed": 7 * 86400.0,
        "archive": 30 * 86400.0,
    }
    pruned = app.sync_client.prune(app.retention)
    assert pruned == {"done": 1, "failed": 1, "cancelled": 1, "archive": 0}
    left = {i for (i,) in db.execute(f'SELECT id FROM "{app.schema}".jobs')}
    assert left == {ids[1], ids[2], ids[5], ids[6], ids[7]}

    # Retention None keeps a status forever.
    keep = App(pg_dsn, app.schema, retention={"done": None, "failed": None, "cancelled": None})
    try:
        finish(db, app, ids[1], "done", "1000 days")
        finish(db, app, ids[2], "failed", "1000 days")
        assert sum(keep.sync_client.prune(keep.retention).values()) == 0
        left = {i for (i,) in db.execute(f'SELECT id FROM "{app.schema}".jobs')}
        assert {ids[1], ids[2]} <= left
    finally:
        keep.close()


def test_the_leader_prunes_by_the_apps_retention(pg_dsn: str, schema: str, db: Any) -> None:
    app = App(pg_dsn, schema, retention={"done": 3600.0, "failed": None})
    try:

        @app.task(name="aged")
        def aged() -> None: ...

        stale, fresh, failed = (e.id for e in aged.enqueue_many([{}] * 3))
        finish(db, app, stale, "done", "2 hours")
        finish(db, app, fresh, "done", "10 minutes")
        finish(db, app, failed, "failed", "1000 days")
        worker = Worker(app, poll_interval=0.05, leader_ttl=1.0)

        async def main() -> None:
            task = asyncio.create_task(worker.run())
            try:
                await wait_for_async(
                    lambda: worker.maintenance is not None and worker.maintenance.stats.pruned > 0,
                    5.0,
                    "the leader never pruned",
                )
            finally:
                worker.stop()
                await asyncio.wait_for(task, 10)

        asyncio.run(main())
        left = {i for (i,) in db.execute(f'SELECT id FROM "{schema}".jobs')}
        assert left == {fresh, failed}
    finally:
        app.close()


# -- batched completions ---------------------------------------------------------------------


def test_completions_are_written_in_batches(app: App, db: Any) -> None:
    @app.task(name="tiny")
    async def tiny() -> None: ...

    tiny.enqueue_many([{}] * 500)
    worker = Worker(app, concurrency=20, burst=True, poll_interval=0.05)
    original = worker.store.job_finish_many
    batches: list[int] = []

    async def counting(conn: Any, claims: list[Claim], completion: str) -> set[int]:
        batches.append(len(claims))
        return await original(conn, claims, completion)

    worker.store.job_finish_many = counting  # type: ignore[method-assign]
    stats = asyncio.run(asyncio.wait_for(worker.run(), 60))
    assert stats.done == 500
    assert statuses(db, app) == {"done": 500}
    assert sum(batches) == 500
    assert len(batches) < 250, f"{len(batches)} completion statements for 500 jobs"
