"""The completer writes outcomes in batches, up to two writes at once: a write that is held up
(here by a row lock another session holds) does not hold up the next batch, its outcomes count
as unwritten until it returns, and a write that fails keeps its outcomes and writes them again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from helpers.polling import comes_true_async, wait_for_async
from helpers.stores import AsyncStore, async_store
from skiplock import App
from skiplock._db.client_async import open_pool
from skiplock._runtime.completer import Completer, Recorded
from skiplock._runtime.execution import DONE, Outcome
from skiplock.backends import PostgresBackend
from skiplock.job import Job


def claim_two(app: App) -> tuple[Job, Job]:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": 1}, {"n": 2}])

    async def claim() -> list[Job]:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            return await async_store(app).job_claim(conn, ["q"], 2, "w", 30.0)

    first, second = asyncio.run(claim())
    return first, second


def status(db: Any, app: App, job: Job) -> str:
    row = db.execute(f'SELECT status FROM "{app.schema}".jobs WHERE id = %s', (job.id,))
    return str(row.fetchone()[0])


def waiting_on_a_lock(db: Any) -> list[int]:
    """Backends of this database waiting for a row lock (the held-up write)."""
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock'"
    )
    return [pid for (pid,) in rows.fetchall()]


@pytest.mark.parametrize("max_writes", [1, 2])
def test_a_held_up_write_does_not_hold_up_the_next_batch_and_counts_as_unwritten(
    app: App, async_store: AsyncStore, db: Any, max_writes: int
) -> None:
    held_up, other = claim_two(app)
    recorded: list[Recorded] = []

    async def main() -> None:
        pool = await open_pool(app.dsn, async_store, min_size=2, max_size=4)
        backend = PostgresBackend.on_client(app.async_client).on_pool(pool)
        completer = Completer(
            async_store, backend, "keep", on_recorded=recorded.extend,
            max_writes=max_writes,
        )  # fmt: skip
        completer.start()
        with psycopg.connect(app.dsn) as locker:  # a transaction that holds the first job's row
            locker.execute(
                f'SELECT 1 FROM "{app.schema}".jobs WHERE id = %s FOR UPDATE', (held_up.id,)
            )
            completer.submit(held_up, DONE, 0.0)
            await wait_for_async(lambda: bool(waiting_on_a_lock(db)), 10)
            completer.submit(other, DONE, 0.0)
            # With two writes at once the second batch is written meanwhile; with one it waits.
            written = await comes_true_async(
                lambda: len(recorded) == 1, 1.0 if max_writes == 1 else 10
            )
            assert written == (max_writes == 2)
            assert completer.pending == (1 if max_writes == 2 else 2)  # the held-up one counts
            assert status(db, app, held_up) == "running"
            locker.rollback()
        await wait_for_async(lambda: len(recorded) == 2, 10)
        assert completer.pending == 0
        await completer.stop()
        await pool.close()

    asyncio.run(main())
    order = [other, held_up] if max_writes == 2 else [held_up, other]
    assert [r.job.id for r in recorded] == [j.id for j in order]
    assert all(r.owned and r.outcome.kind == "done" for r in recorded)
    assert (status(db, app, held_up), status(db, app, other)) == ("done", "done")


def test_a_failed_write_keeps_its_outcomes_and_writes_them_again(
    app: App, async_store: AsyncStore, db: Any
) -> None:
    job, _ = claim_two(app)
    recorded: list[Recorded] = []

    async def main() -> None:
        pool = await open_pool(app.dsn, async_store, min_size=2, max_size=4)
        backend = PostgresBackend.on_client(app.async_client).on_pool(pool)
        completer = Completer(async_store, backend, "keep", on_recorded=recorded.extend)
        completer.start()
        with psycopg.connect(app.dsn) as locker:
            locker.execute(f'SELECT 1 FROM "{app.schema}".jobs WHERE id = %s FOR UPDATE', (job.id,))
            completer.submit(job, DONE, 0.0)
            await wait_for_async(lambda: bool(waiting_on_a_lock(db)), 10)
            (writer,) = waiting_on_a_lock(db)
            db.execute("SELECT pg_terminate_backend(%s)", (writer,))  # the write fails
            locker.rollback()
            await asyncio.sleep(0.3)
            assert recorded == [] and completer.pending == 1  # kept, not lost
        await wait_for_async(lambda: len(recorded) == 1, 10)  # written again, a second later
        assert completer.pending == 0
        await completer.stop()
        await pool.close()

    asyncio.run(main())
    assert recorded[0].job.id == job.id and recorded[0].owned
    assert status(db, app, job) == "done"


@pytest.mark.parametrize("second", ["done", "failed"])
def test_of_two_claims_of_one_job_in_a_batch_only_the_newer_is_reported_owning_it(
    app: App, async_store: AsyncStore, db: Any, second: str
) -> None:
    """A worker whose outcome writes were held up (its server away) may hold the outcome of a
    claim whose lease ran out and, in the same batch, that of its own new claim of the job:
    the write changes the row once (each statement checks every claim), and only the claim
    that did is reported owning the job; the older one is reported lost, as it is."""
    old, _ = claim_two(app)
    db.execute(
        f"UPDATE \"{app.schema}\".jobs SET status = 'pending', locked_by = NULL,"
        " locked_at = NULL, locked_until = NULL WHERE id = %s",
        (old.id,),
    )  # what a reclaim of the expired lease does

    async def claim_again() -> Job:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            (job,) = await async_store.job_claim(conn, ["q"], 1, "w", 30.0)
            return job

    new = asyncio.run(claim_again())
    assert new.id == old.id and new.attempts == old.attempts + 1
    recorded: list[Recorded] = []
    outcome = DONE if second == "done" else Outcome("failed", error="boom")

    async def main() -> None:
        pool = await open_pool(app.dsn, async_store, min_size=1, max_size=2)
        backend = PostgresBackend.on_client(app.async_client).on_pool(pool)
        completer = Completer(async_store, backend, "keep", on_recorded=recorded.extend)
        completer.submit(old, DONE, 0.0)
        completer.submit(new, outcome, 0.0)
        assert await completer.flush()  # one batch
        await pool.close()

    asyncio.run(main())
    owned = {r.job.attempts: r.owned for r in recorded}
    assert owned == {old.attempts: False, new.attempts: True}
    assert status(db, app, new) == second
