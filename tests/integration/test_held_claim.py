"""The held-lock claim: one job claimed in a transaction the caller ends, its row locked."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from skiplock import App, JobStatus
from skiplock._store_sync import SyncStore


def test_claims_one_job_in_an_open_transaction_that_keeps_its_row_locked(app: App, db: Any) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    first, second = t.enqueue_many([{"n": 1}, {"n": 2}])
    store = SyncStore(app.queries)
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


def test_an_empty_claim_ends_its_transaction_and_keeps_prepared_statements(app: App) -> None:
    """An empty claim commits (nothing was written): a rollback would make psycopg deallocate
    the connection's prepared statements, and every claim would be planned again."""

    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    store = SyncStore(app.queries)
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
