"""The held-lock claim: one job claimed in a transaction the caller ends, its row locked."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from helpers.stores import AsyncStore, SyncStore
from skiplock import App, JobStatus


def test_claims_one_job_in_an_open_transaction_that_keeps_its_row_locked(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    first, second = t.enqueue_many([{"n": 1}, {"n": 2}])
    with (
        psycopg.connect(app.dsn, autocommit=True) as holder,
        psycopg.connect(app.dsn, autocommit=True) as other,
    ):
        job = store.job_claim_held(holder, ["q"], "w-held", 30.0)
        assert job is not None and job.id == first.id
        assert (job.status, job.attempts, job.locked_by) == (JobStatus.RUNNING, 1, "w-held")
        assert holder.info.transaction_status == TransactionStatus.INTRANS
        # Uncommitted: others still see it pending, and skip it as locked.
        status = f'SELECT status FROM "{app.schema}".jobs WHERE id = %s'
        assert db.execute(status, (first.id,)).fetchone() == ("pending",)
        assert [j.id for j in store.job_claim(other, ["q"], 10, "w-other", 30.0)] == [second.id]
        holder.rollback()  # as a crash would: the job is claimable again, attempt not spent
        assert db.execute(
            f'SELECT status, attempts FROM "{app.schema}".jobs WHERE id = %s', (first.id,)
        ).fetchone() == ("pending", 0)


def test_an_empty_claim_ends_its_transaction_and_keeps_prepared_statements(
    app: App, store: SyncStore
) -> None:
    """An empty claim commits (nothing was written): a rollback would make psycopg deallocate
    the connection's prepared statements, and every claim would be planned again."""

    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    with psycopg.connect(app.dsn, autocommit=True) as conn:
        for _ in range(8):
            assert store.job_claim_held(conn, ["q"], "w-held", 30.0) is None
            assert conn.info.transaction_status == TransactionStatus.IDLE
        prepared = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        assert any("FOR UPDATE SKIP LOCKED" in statement for (statement,) in prepared)
        t.enqueue(n=1)
        job = store.job_claim_held(conn, ["q"], "w-held", 30.0)
        assert job is not None
        conn.commit()


def test_a_claim_cancelled_while_it_waits_leaves_the_connection_idle(
    app: App, async_store: AsyncStore, db: Any
) -> None:
    """Worker shutdown cancels a held slot mid-claim: its transaction must not go back to the
    pool open (the pool would roll it back itself, with a warning)."""

    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.enqueue(n=1)

    async def scenario() -> TransactionStatus:
        store = async_store
        conn = await psycopg.AsyncConnection.connect(app.dsn, autocommit=True)
        async with conn:
            # A table lock is waited on, not skipped: the claim blocks until it is cancelled.
            with db.transaction():
                db.execute(f'LOCK TABLE "{app.schema}".jobs IN ACCESS EXCLUSIVE MODE')
                claim = asyncio.create_task(store.job_claim_held(conn, ["q"], "w-held", 30.0))
                await asyncio.sleep(0.3)
                claim.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(claim, 10)
            status = conn.info.transaction_status
            await conn.execute("SELECT 1")  # and it is usable
            return status

    status = asyncio.run(scenario())
    assert status == TransactionStatus.IDLE
    assert db.execute(f'SELECT status FROM "{app.schema}".jobs').fetchall() == [("pending",)]


def test_a_claim_across_queues_keeps_only_its_own_job_locked(
    app: App, store: SyncStore, db: Any
) -> None:
    """Claiming the best job of several queues looks at the best job of each; the held
    transaction must not keep the others locked (they would be unclaimable, by anyone, for as
    long as the claimed job runs).  The queues take turns in the order given (the worker
    rotates it from claim to claim), whatever the priorities of their jobs."""

    @app.task(name="t", queue="a")
    def t(n: int) -> None: ...

    low = t.with_options(priority=5).enqueue(n=1).id
    best = t.with_options(queue="b", priority=1).enqueue(n=2).id
    other = t.with_options(queue="c", priority=3).enqueue(n=3).id
    with (
        psycopg.connect(app.dsn, autocommit=True) as holder,
        psycopg.connect(app.dsn, autocommit=True) as second,
        psycopg.connect(app.dsn, autocommit=True) as third,
    ):
        job = store.job_claim_held(holder, ["b", "a", "c"], "w-1", 30.0)
        assert job is not None and job.id == best
        job = store.job_claim_held(second, ["c", "a"], "w-2", 30.0)
        assert job is not None and job.id == other
        job = store.job_claim_held(third, ["b", "c", "a"], "w-3", 30.0)
        assert job is not None and job.id == low
        assert store.job_claim_held(db, ["a", "b", "c"], "w-4", 30.0) is None
        for conn in (holder, second, third):
            assert conn.info.transaction_status == TransactionStatus.INTRANS
            conn.commit()
    status = f'SELECT id, status, locked_by FROM "{app.schema}".jobs ORDER BY id'
    assert db.execute(status).fetchall() == [
        (low, "running", "w-3"),
        (best, "running", "w-1"),
        (other, "running", "w-2"),
    ]
