"""Limits per key for held-lock jobs, whose rows every other session sees as pending while they
run: a held-lock claim of a limited key's job locks one of the key's slots (held_key_runs) for
as long as the job runs, and every claim of the key, leased or held, counts them."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.polling import comes_true_async
from helpers.stores import SyncStore
from skiplock import App, Worker
from skiplock._db.records import LimitedClaim, QueueLimits

pytestmark = pytest.mark.smoke


def claim_held(store: SyncStore, conn: Any, guard: Any, worker: str = "w") -> Any:
    job, _ = store.job_claim_held_key_limited(conn, guard, ["q"], worker, 30.0)
    return job


def test_held_claims_of_a_limited_key_stop_at_its_limit_until_a_job_ends(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.with_options(limit_key="k").enqueue_many([{"n": i} for i in range(6)])
    app.sync_client.set_key_limit("k", concurrency=2)
    conns = [psycopg.connect(app.dsn, autocommit=True) for _ in range(4)]
    guard = psycopg.connect(app.dsn, autocommit=True)
    try:
        first, second, third = (claim_held(store, guard=guard, conn=c) for c in conns[:3])
        assert first is not None and second is not None
        assert third is None, "a third held-lock job of a key limited to 2 started"
        conns[0].rollback()  # as a crash would: the job's slot ends with its transaction
        assert claim_held(store, conns[2], guard) is not None
        conns[1].close()  # the session dropped (a dead worker): its slot ends too
        assert claim_held(store, conns[3], guard) is not None
        assert claim_held(store, conns[0], guard) is None
    finally:
        for conn in (*conns, guard):
            conn.close()


def test_leased_and_held_claims_of_a_key_count_each_other(app: App, store: SyncStore) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.with_options(limit_key="k").enqueue_many([{"n": i} for i in range(6)])
    app.sync_client.set_key_limit("k", concurrency=3)
    with (
        psycopg.connect(app.dsn, autocommit=True) as held,
        psycopg.connect(app.dsn, autocommit=True) as guard,
        psycopg.connect(app.dsn, autocommit=True) as leased,
        psycopg.connect(app.dsn, autocommit=True) as again,
    ):
        assert claim_held(store, held, guard) is not None
        jobs, _ = store.job_claim_key_limited(leased, ["q"], 10, "w2", 30.0)
        assert len(jobs) == 2, "the leased claim did not count the running held-lock job"
        assert claim_held(store, again, guard, "w3") is None, "it did not count the leased ones"
        held.rollback()  # the held-lock job ended: its slot is free
        assert claim_held(store, again, guard, "w3") is not None


def test_a_held_claim_spends_its_keys_rate_budget(app: App, store: SyncStore) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.with_options(limit_key="r").enqueue_many([{"n": i} for i in range(5)])
    app.sync_client.set_key_limit("r", rate=2, period=3600)  # two starts an hour
    conns = [psycopg.connect(app.dsn, autocommit=True) for _ in range(4)]
    try:
        guard = conns[3]
        started = [claim_held(store, c, guard) for c in conns[:3]]
        assert [j is not None for j in started] == [True, True, False]
        conns[0].commit()
        jobs, _ = store.job_claim_key_limited(conns[0], ["q"], 10, "w2", 30.0)
        assert jobs == [], "a leased claim started a job past the budget the held ones spent"
    finally:
        for conn in conns:
            conn.close()


def test_a_limited_keys_held_jobs_run_in_a_queue_with_limits_of_its_own(
    app: App, store: SyncStore
) -> None:
    @app.task(name="t", queue="lim")
    def t(n: int) -> None: ...

    t.with_options(limit_key="k").enqueue_many([{"n": i} for i in range(3)])
    app.sync_client.set_concurrency_limit("lim", 5)
    app.sync_client.set_key_limit("k", concurrency=1)
    claim = LimitedClaim("lim", QueueLimits(5, False), "w", 30.0, keys_limited=True)
    conns = [psycopg.connect(app.dsn, autocommit=True) for _ in range(3)]
    try:
        guard = conns[2]
        first, _ = store.job_claim_held_limited_with_keys(conns[0], guard, claim)
        second, _ = store.job_claim_held_limited_with_keys(conns[1], guard, claim)
        assert first is not None, "a limited key's job was passed over in a limited queue"
        assert second is None, "a second job of a key limited to 1 started"
    finally:
        for conn in conns:
            conn.close()


LEDGER = """
CREATE TABLE {} (
    id bigserial PRIMARY KEY,
    model text NOT NULL,
    started timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended timestamptz
)
"""


def test_held_and_leased_workers_keep_a_key_to_its_limit(app: App, db: Any) -> None:
    """Two held-lock workers and two leased ones, 4 slots each, drain one key limited to 3
    (and jobs of no key beside it).  Each run writes its start and end in a ledger table on a
    connection of its own, by the server's clock; the most runs of the key that overlap there
    is the key's concurrency, and it is exactly 3, with both kinds of workers running it."""
    ledger = sql.Identifier(app.schema, "ledger")
    db.execute(sql.SQL(LEDGER).format(ledger))
    app.sync_client.set_key_limit("tenant", concurrency=3)
    limit = 3

    async def record(model: str) -> None:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            cur = await conn.execute(
                sql.SQL("INSERT INTO {} (model) VALUES (%s) RETURNING id").format(ledger),
                [model],
            )
            (run,) = await cur.fetchone()  # type: ignore[misc]
            # Long enough that three runs overlap on a loaded machine.
            await asyncio.sleep(0.25)
            await conn.execute(
                sql.SQL("UPDATE {} SET ended = clock_timestamp() WHERE id = %s").format(ledger),
                [run],
            )

    @app.task(name="held_nap", queue="held")
    async def held_nap(n: int) -> None:
        await record("held")

    @app.task(name="leased_nap", queue="leased")
    async def leased_nap(n: int) -> None:
        await record("lease")

    @app.task(name="free", queue="held")
    async def free(n: int) -> None:
        await asyncio.sleep(0.01)

    # The key's jobs in two queues, each served by one kind of worker.
    held_nap.with_options(limit_key="tenant").enqueue_many([{"n": i} for i in range(20)])
    leased_nap.with_options(limit_key="tenant").enqueue_many([{"n": i} for i in range(20)])
    free.enqueue_many([{"n": i} for i in range(20)])
    workers = [
        Worker(app, queues=[queue], concurrency=4, model=model, poll_interval=0.05)
        for queue, model in (
            ("held", "held"),
            ("held", "held"),
            ("leased", "lease"),
            ("leased", "lease"),
        )
    ]

    async def main() -> bool:
        runs = asyncio.gather(*(w.run() for w in workers))
        done = await comes_true_async(lambda: sum(w.stats.done for w in workers) >= 60, 90)
        for worker in workers:
            worker.stop()
        await asyncio.wait_for(runs, 30)
        return done

    assert asyncio.run(main()), [w.stats.done for w in workers]  # held-lock ones ran none?
    spans = db.execute(sql.SQL("SELECT model, started, ended FROM {}").format(ledger)).fetchall()
    assert len(spans) == 40 and all(end is not None for _, _, end in spans)
    events = sorted([(s, 1) for _, s, _ in spans] + [(e, -1) for _, _, e in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    assert peak <= limit, f"{peak} jobs of a key limited to {limit} ran at once"
    assert peak == limit, "never reached the limit: the check could not have failed"
    models = {m for m, _, _ in spans}
    assert models == {"held", "lease"}, f"only {models} workers ran the key's jobs"
