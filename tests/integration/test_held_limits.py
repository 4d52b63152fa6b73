"""Queue concurrency and rate limits for held-lock jobs, whose rows every other session sees
as pending while they run: the claim counts them by the lock their transaction holds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from helpers.polling import comes_true_async
from helpers.running_peak import RunningPeak
from helpers.stores import AsyncStore, SyncStore
from skiplock import App, Worker
from skiplock._db.records import LimitedClaim, QueueLimits

pytestmark = pytest.mark.smoke


def statuses(db: Any, app: App) -> dict[str, int]:
    return dict(db.execute(f'SELECT status, count(*) FROM "{app.schema}".jobs GROUP BY 1'))


def test_held_claims_of_a_limited_queue_stop_at_the_limit_until_a_job_ends(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="t", queue="lim")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": i} for i in range(6)])
    app.sync_client.set_concurrency_limit("lim", 2)
    conns = [psycopg.connect(app.dsn, autocommit=True) for _ in range(4)]
    guard = psycopg.connect(app.dsn, autocommit=True)
    try:

        def claim(conn: psycopg.Connection[Any]) -> Any:
            return store.job_claim_held_limited(
                conn, guard, LimitedClaim("lim", QueueLimits(2, False), "w", 30.0)
            )

        first, second, third = (claim(c) for c in conns[:3])
        assert first is not None and second is not None
        assert third is None, "a third held-lock job started in a queue limited to 2"
        # Both rows still look pending to everyone else: the count comes from the slots.
        assert statuses(db, app) == {"pending": 6}
        conns[0].rollback()  # as a crash would: the job's slot ends with its transaction
        assert claim(conns[2]) is not None
        conns[1].close()  # the session dropped (a dead worker): its slot ends too
        assert claim(conns[3]) is not None
        assert claim(conns[0]) is None
    finally:
        for conn in (*conns, guard):
            conn.close()


def test_leased_claims_count_running_held_lock_jobs(app: App, store: SyncStore, db: Any) -> None:
    @app.task(name="t", queue="lim")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": i} for i in range(6)])
    app.sync_client.set_concurrency_limit("lim", 3)
    with (
        psycopg.connect(app.dsn, autocommit=True) as held,
        psycopg.connect(app.dsn, autocommit=True) as guard,
        psycopg.connect(app.dsn, autocommit=True) as leased,
    ):
        assert (
            store.job_claim_held_limited(
                held, guard, LimitedClaim("lim", QueueLimits(3, False), "w1", 30.0)
            )
            is not None
        )
        jobs = store.job_claim_limited(
            leased, LimitedClaim("lim", QueueLimits(3, False), "w2", 30.0, want=10)
        )
        assert len(jobs) == 2, "the leased claim did not count the running held-lock job"
        # And the other way round: the two leased jobs, now committed, count for the next.
        with psycopg.connect(app.dsn, autocommit=True) as again:
            assert (
                store.job_claim_held_limited(
                    again, guard, LimitedClaim("lim", QueueLimits(3, False), "w3", 30.0)
                )
                is None
            )
        held.commit()
    assert statuses(db, app) == {"running": 3, "pending": 3}


def test_concurrent_held_claims_take_exactly_the_limit(app: App, async_store: AsyncStore) -> None:
    """Ten slots claim at once from a queue limited to 3: the per-queue serialisation lets
    exactly 3 start (without it, each would count the others' slots before they were taken)."""

    @app.task(name="t", queue="lim")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": i} for i in range(20)])
    app.sync_client.set_concurrency_limit("lim", 3)

    async def scenario() -> int:
        store = async_store
        conns = [await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) for _ in range(20)]
        try:
            claims = [
                store.job_claim_held_limited(
                    c, g, LimitedClaim("lim", QueueLimits(3, False), f"w{i}", 30.0)
                )
                for i, (c, g) in enumerate(zip(conns[:10], conns[10:], strict=True))
            ]
            jobs = await asyncio.gather(*claims)
            return sum(job is not None for job in jobs)
        finally:
            for conn in conns:
                await conn.close()

    for _ in range(3):
        assert asyncio.run(scenario()) == 3


def test_held_lock_workers_keep_a_queue_to_its_concurrency_limit(app: App, db: Any) -> None:
    """Two held-lock workers with 5 slots each and a leased worker with 1, on a queue limited
    to 3 (so reaching the limit takes held-lock jobs)."""
    app.sync_client.set_concurrency_limit("lim", 3)
    gauge = RunningPeak()

    @app.task(name="nap", queue="lim")
    async def nap(n: int) -> None:
        with gauge.running():
            # Long enough that three runs overlap on a loaded machine (at 0.05 s, one run in
            # three peaked at 2 with the load average above 10).
            await asyncio.sleep(0.2)

    nap.enqueue_many([{"n": i} for i in range(40)])
    slots = {"held": 5, "lease": 1}
    # Not burst workers: one stops at its first claim that the limit leaves empty.
    workers = [
        Worker(app, concurrency=slots[m], model=m, poll_interval=0.05)
        for m in ("held", "held", "lease")
    ]

    async def main() -> None:
        runs = asyncio.gather(*(w.run() for w in workers))
        await comes_true_async(lambda: sum(w.stats.done for w in workers) >= 40, 60)
        for worker in workers:
            worker.stop()
        await asyncio.wait_for(runs, 30)

    asyncio.run(main())
    assert gauge.peak <= 3, f"{gauge.peak} jobs of a queue limited to 3 ran at once"
    assert gauge.peak == 3, "never reached the limit: the check could not have failed"
    assert sum(w.stats.done for w in workers) == 40
    assert workers[0].stats.done + workers[1].stats.done >= 2
    assert statuses(db, app) == {"done": 40}


def test_a_held_lock_worker_spends_a_queues_rate_budget(app: App, db: Any) -> None:
    app.sync_client.set_rate_limit("rated", 3, 3600)  # three starts an hour
    ran: list[int] = []

    @app.task(name="tick", queue="rated")
    async def tick(n: int) -> None:
        ran.append(n)

    tick.enqueue_many([{"n": i} for i in range(6)])
    worker = Worker(app, concurrency=5, model="held", poll_interval=0.05, burst=True)
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert time.monotonic() - started < 20
    assert len(ran) == 3, f"{len(ran)} starts in a queue allowed 3 an hour"
    assert statuses(db, app) == {"done": 3, "pending": 3}
    # The budget is spent for every worker, leased ones too.
    asyncio.run(asyncio.wait_for(Worker(app, concurrency=5, burst=True).run(), 30))
    assert len(ran) == 3


def test_a_claim_whose_budget_cannot_be_spent_is_rolled_back(
    app: App, store: SyncStore, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's job must not start unpaid: it is rolled back, its connection left idle."""

    @app.task(name="t", queue="rated")
    def t(n: int) -> None: ...

    (job,) = t.enqueue_many([{"n": 1}])
    app.sync_client.set_rate_limit("rated", 3, 3600)

    def spend(*args: Any) -> None:
        raise psycopg.OperationalError("the server went away")

    monkeypatch.setattr(store, "queue_spend_rate_budget", spend)
    with (
        psycopg.connect(app.dsn, autocommit=True) as conn,
        psycopg.connect(app.dsn, autocommit=True) as guard,
    ):
        with pytest.raises(psycopg.OperationalError):
            store.job_claim_held_limited(
                conn, guard, LimitedClaim("rated", QueueLimits(None, True), "w", 30.0)
            )
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert guard.info.transaction_status == TransactionStatus.IDLE
    row = db.execute(f'SELECT status, attempts FROM "{app.schema}".jobs WHERE id = %s', (job.id,))
    assert row.fetchone() == ("pending", 0)
    assert store.queue_rate_budget(db, "rated") == pytest.approx(3, abs=0.01)


def test_queue_status_counts_running_held_lock_jobs_as_running(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": i} for i in range(3)])

    def counts() -> tuple[int, int]:
        (row,) = app.sync_client.queue_status()
        return row["pending"], row["running"]

    with (
        psycopg.connect(app.dsn, autocommit=True) as first,
        psycopg.connect(app.dsn, autocommit=True) as second,
    ):
        assert store.job_claim_held(first, ["q"], "w", 30.0) is not None
        # Across several queues the claim is by id (job_claim_by_id): marked all the same.
        assert store.job_claim_held(second, ["other", "q"], "w", 30.0) is not None
        assert statuses(db, app) == {"pending": 3}  # what the table says to other sessions
        assert counts() == (1, 2)
        first.rollback()
        assert counts() == (2, 1)
        second.rollback()
        assert counts() == (3, 0)


def test_a_held_lock_job_started_before_its_queue_got_a_limit_counts_against_it(
    app: App,
    store: SyncStore,
) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": i} for i in range(3)])
    with (
        psycopg.connect(app.dsn, autocommit=True) as held,
        psycopg.connect(app.dsn, autocommit=True) as guard,
        psycopg.connect(app.dsn, autocommit=True) as other,
    ):
        assert store.job_claim_held(held, ["q"], "w1", 30.0) is not None  # no limit yet
        app.sync_client.set_concurrency_limit("q", 1)
        assert (
            store.job_claim_held_limited(
                other, guard, LimitedClaim("q", QueueLimits(1, False), "w2", 30.0)
            )
            is None
        )
        assert (
            store.job_claim_limited(
                other, LimitedClaim("q", QueueLimits(1, False), "w3", 30.0, want=5)
            )
            == []
        )
        held.rollback()
        assert (
            store.job_claim_limited(
                other, LimitedClaim("q", QueueLimits(1, False), "w3", 30.0, want=5)
            )
            != []
        )
