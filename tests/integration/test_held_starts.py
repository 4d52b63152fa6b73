"""Held-lock jobs whose worker died: the attempt is counted at the next claim (migration 0005).

A held-lock job's claim, attempt count and outcome are one transaction; a worker that dies
mid-job rolls all of it back.  Each start is also recorded apart (``held_starts``), so the next
claim of the unchanged row knows how many starts died, counts them as attempts and runs the
job as the attempt after them, or fails it when they were its last.  Here a death is a claim
whose connection closes without a commit (what the server sees when a worker process dies);
tests/e2e/test_worker_process.py kills real processes.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.stores import AsyncStore, async_store
from skiplock import App, FixedDelay, Job, JobContext, JobStatus, Retry, Worker
from skiplock._runtime.execution import dead_starts

QUEUE = "held"


def held_starts(db: psycopg.Connection[Any], schema: str) -> list[tuple[int, int]]:
    query = sql.SQL("SELECT job_id, starts FROM {} ORDER BY job_id")
    return [tuple(r) for r in db.execute(query.format(sql.Identifier(schema, "held_starts")))]


def job_row(db: psycopg.Connection[Any], schema: str, job_id: int) -> tuple[str, int, str | None]:
    query = sql.SQL("SELECT status, attempts, last_error FROM {} WHERE id = %s")
    row = db.execute(query.format(sql.Identifier(schema, "jobs")), [job_id]).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def die_while_running(app: App, job_id: int) -> None:
    """What a worker does up to running a held-lock job, then its end: the claim's connection
    goes away without a commit."""
    store = async_store(app)

    async def start_and_die() -> None:
        conn = await psycopg.AsyncConnection.connect(app.dsn, autocommit=True)
        job = await store.job_claim_held(conn, [QUEUE], "doomed-worker", 30.0)
        assert job is not None and job.id == job_id
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as other:
            starts, cancel_requested = await store.job_held_start_count(other, job.id)
            assert starts >= 1 and not cancel_requested
        await conn.close()  # the server rolls the claim back

    asyncio.run(start_and_die())


def prune_held_starts(app: App) -> int:
    store = async_store(app)

    async def prune() -> int:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            return await store.job_held_starts_prune(conn)

    return asyncio.run(prune())


def burst(app: App) -> Any:
    return asyncio.run(Worker(app, queues=[QUEUE], burst=True, poll_interval=0.05).run())


def test_a_death_counts_as_an_attempt_and_the_job_runs_again_at_once(
    app: App, db: psycopg.Connection[Any]
) -> None:
    runs: list[int] = []

    @app.task(name="flaky", queue=QUEUE, model="held", max_attempts=3)
    def flaky(n: int) -> None:
        runs.append(n)

    job_id = flaky.enqueue(n=7).id
    die_while_running(app, job_id)
    assert job_row(db, app.schema, job_id)[:2] == ("pending", 0)  # rolled back: no trace
    assert held_starts(db, app.schema) == [(job_id, 1)]  # but the start was recorded
    # Pruning keeps it: the job's row is still the version that start claimed.
    assert prune_held_starts(app) == 0
    assert held_starts(db, app.schema) == [(job_id, 1)]

    stats = burst(app)
    status, attempts, error = job_row(db, app.schema, job_id)
    assert (status, attempts) == ("done", 2)  # the dead attempt, then the one that ran
    assert runs == [7]
    assert (stats.claimed, stats.done, stats.retried, stats.failed) == (1, 1, 0, 0)
    assert error is not None and error.startswith("WorkerDied: the worker running attempt 1 ")
    # The burst worker's last maintenance round pruned the record: the row has moved on.
    assert held_starts(db, app.schema) == []


def test_deaths_in_a_row_are_each_an_attempt(app: App, db: psycopg.Connection[Any]) -> None:
    runs: list[int] = []

    @app.task(name="fragile", queue=QUEUE, model="held", max_attempts=4)
    def fragile(n: int) -> None:
        runs.append(n)

    job_id = fragile.enqueue(n=1).id
    for _ in range(3):
        die_while_running(app, job_id)
    assert held_starts(db, app.schema) == [(job_id, 3)]
    stats = burst(app)
    status, attempts, error = job_row(db, app.schema, job_id)
    assert (status, attempts) == ("done", 4)  # three dead attempts, then the fourth ran
    assert runs == [1] and stats.done == 1
    assert error is not None and "attempt 3 " in error and "3 dead in a row" in error


def test_a_death_of_the_last_attempt_fails_the_job_without_running_it(
    app: App, db: psycopg.Connection[Any]
) -> None:
    runs: list[int] = []

    @app.task(name="poison", queue=QUEUE, model="held", max_attempts=1)
    def poison(n: int) -> None:
        runs.append(n)

    job_id = poison.enqueue(n=1).id
    die_while_running(app, job_id)
    stats = burst(app)
    status, attempts, error = job_row(db, app.schema, job_id)
    assert (status, attempts) == ("failed", 1)
    assert error is not None and error.startswith("WorkerDied")
    assert runs == []
    assert (stats.failed, stats.done) == (1, 0)


def test_a_transaction_lost_after_dead_starts_counts_them_all(
    app: App, db: psycopg.Connection[Any]
) -> None:
    """The worker lives but its claim's transaction is lost (here the task ends its own
    session): that attempt is counted too, by the worker at once (with its backoff) or, when
    another claim locked the row first, by that claim as a dead start."""
    seen: list[int] = []

    @app.task(name="cut_off", queue=QUEUE, model="held", max_attempts=5, retry=FixedDelay(0),
              pass_context=True)  # fmt: skip
    async def cut_off(ctx: JobContext, n: int) -> None:
        seen.append(ctx.job.attempts)
        if len(seen) == 1:
            assert ctx.conn is not None
            await ctx.conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    job_id = cut_off.enqueue(n=1).id
    die_while_running(app, job_id)
    burst(app)
    status, attempts, error = job_row(db, app.schema, job_id)
    assert seen == [2, 3]  # attempt 1 died; 2 lost its transaction; 3 ran
    assert (status, attempts) == ("done", 3)
    assert error is not None
    assert error.startswith("the held-lock transaction rolled back") or (
        "attempt 2 " in error and "2 dead in a row" in error
    )


def test_the_worker_counts_a_lost_transaction_above_the_dead_starts(
    app: App, async_store: AsyncStore, db: psycopg.Connection[Any]
) -> None:
    """The statement the worker runs after losing its transaction: the rollback took back the
    claim's count and the dead starts' count with it; the row gets the claim's number again."""

    @app.task(name="lost", queue=QUEUE, model="held", max_attempts=5)
    def lost(n: int) -> None: ...

    job_id = lost.enqueue(n=1).id
    store = async_store

    async def claim_count_and_lose() -> bool:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            job = await store.job_claim_held(conn, [QUEUE], "w", 30.0)
            assert job is not None and job.attempts == 1
            # As after two dead starts: this claim runs attempt 3.
            assert await store.job_count_dead_attempts(conn, job.claim, 3, "WorkerDied: ...")
            await conn.rollback()  # the transaction is lost
            claim = job.claim._replace(attempt=3)
            return await store.job_spend_rolled_back_attempt(conn, claim, "rolled back", 60.0)

    assert asyncio.run(claim_count_and_lose()) is True
    assert job_row(db, app.schema, job_id) == ("scheduled", 3, "rolled back")


def test_snoozes_and_retries_are_not_deaths(app: App, db: psycopg.Connection[Any]) -> None:
    calls: list[int] = []

    @app.task(name="patient", queue=QUEUE, model="held", max_attempts=5, retry=FixedDelay(0))
    def patient(n: int) -> None:
        calls.append(n)
        if len(calls) <= 2:
            raise Retry(0)  # snoozed: the attempt is not spent, the row written back
        if len(calls) == 3:
            raise ValueError("an ordinary failure")

    job_id = patient.enqueue(n=1).id
    stats = burst(app)
    status, attempts, error = job_row(db, app.schema, job_id)
    # Four claims (a snooze counts its claim and grants one more attempt), none a death.
    assert (status, attempts) == ("done", 4)
    assert len(calls) == 4
    assert (stats.snoozed, stats.retried, stats.done) == (2, 1, 1)
    assert error is not None and "ValueError" in error and "WorkerDied" not in error


def test_a_job_stopped_at_shutdown_is_released_not_counted_as_a_death(
    app: App, db: psycopg.Connection[Any]
) -> None:
    started = asyncio.Event()
    runs: list[str] = []

    @app.task(name="long", queue=QUEUE, model="held", max_attempts=1)
    async def long(n: int) -> None:
        runs.append("start")
        if len(runs) == 1:
            started.set()
            await asyncio.sleep(60)

    job_id = long.enqueue(n=1).id

    async def stop_mid_job() -> None:
        worker = Worker(app, queues=[QUEUE], poll_interval=0.05, shutdown_grace=0.0)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 20)
        worker.stop()
        await asyncio.wait_for(running, 30)

    asyncio.run(stop_mid_job())
    assert job_row(db, app.schema, job_id)[:2] == ("pending", 0)
    assert held_starts(db, app.schema) == []  # the stopped start was forgotten
    stats = burst(app)  # max_attempts=1: a start taken for a death would fail the job
    assert job_row(db, app.schema, job_id)[:2] == ("done", 1)
    assert runs == ["start", "start"] and stats.done == 1


@pytest.mark.parametrize(
    ("claimed", "earlier", "counted", "spent"),
    [(1, 1, 2, False), (1, 2, 3, False), (2, 1, 3, False), (1, 3, 3, True), (3, 1, 3, True)],
)
def test_what_dead_starts_count(claimed: int, earlier: int, counted: int, spent: bool) -> None:
    """``claimed``: the attempt number the claim gave the job (max 3)."""
    now = datetime.now(UTC)
    job = Job(1, "default", "t", {}, JobStatus.RUNNING, 0, now, claimed, 3, "w", now, now,
              None, None, now)  # fmt: skip
    dead = dead_starts(job, earlier)
    assert (dead.attempts, dead.spent) == (counted, spent)
    made = claimed - 1 + earlier
    assert f"running attempt {made} " in dead.error and f"({earlier} dead in a row" in dead.error
