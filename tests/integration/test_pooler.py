"""skiplock through a real PgBouncer in transaction mode (docs/operations.md, "Poolers").

Such a pooler gives each transaction whichever server connection is free.  psycopg prepares a
statement on a connection after a few runs and numbers them per connection (``_pg3_0``...), so
through a pooler that does not track them (PgBouncer 1.18 here, as before 1.21) two clients'
statements meet on one server connection: one client's prepare finds the other's name taken.
skiplock must turn that into an error that names the fix, lose nothing, and, with prepared
statements off, work through the pooler: enqueue (also in the caller's transaction),
administration, and both worker models.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.pgbouncer import running_pgbouncer
from helpers.running_peak import RunningPeak
from helpers.stores import async_store
from skiplock import App, ConfigurationError, Worker
from skiplock._db.migrations import all_migrations
from skiplock._runtime import listener
from skiplock._runtime.listener import Listener
from skiplock.worker import cancel_and_wait

pytestmark = pytest.mark.slow

PREPARE_AFTER = 5  # psycopg's default prepare_threshold: prepared at the 6th run


@pytest.fixture(scope="module")
def pooled_dsn(pg_dsn: str) -> Iterator[str]:
    """A DSN through PgBouncer, transaction mode, one server connection: every client's
    transactions take turns on the same server session."""
    with running_pgbouncer(pg_dsn, pool_mode="transaction", pool_size=1) as dsn:
        yield dsn


@pytest.fixture(scope="module")
def roomy_pooled_dsn(pg_dsn: str) -> Iterator[str]:
    """Transaction mode with four server connections: a held-lock job keeps one for itself."""
    with running_pgbouncer(pg_dsn, pool_mode="transaction", pool_size=4) as dsn:
        yield dsn


def pooled_app(dsn: str, schema: str, **options: Any) -> App:
    app = App(dsn, schema, **options)

    @app.task(name="note", queue="pooled")
    def note(n: int) -> None:
        return None

    @app.task(name="note_held", queue="pooled_held", model="held")
    def note_held(n: int) -> None:
        return None

    return app


def job_counts(db: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    rows = db.execute(
        psycopg.sql.SQL("SELECT status, count(*) FROM {}.jobs GROUP BY status").format(
            psycopg.sql.Identifier(schema)
        )
    ).fetchall()
    return {status: count for status, count in rows}


def test_prepared_statements_through_the_pooler_fail_with_an_error_naming_the_fix(
    pooled_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    first, second = pooled_app(pooled_dsn, schema), pooled_app(pooled_dsn, schema)
    assert first.prepared_statements and second.prepared_statements  # the default
    enqueued = 0
    try:
        # The first client prepares its insert on the one server session...
        for n in range(PREPARE_AFTER + 3):
            first.tasks["note"].enqueue(n=n)
            enqueued += 1
        # ...where the second client's prepare of its own first statement finds the name taken.
        with pytest.raises(ConfigurationError) as caught:
            for n in range(PREPARE_AFTER + 3):
                second.tasks["note"].enqueue(n=n)
                enqueued += 1
    finally:
        first.close()
        second.close()
    message = str(caught.value)
    assert "already exists" in message
    assert "transaction-mode connection pooler" in message
    assert "SKIPLOCK_PREPARED_STATEMENTS=off" in message
    assert "App(prepared_statements=False)" in message
    # Nothing half-done: every enqueue that returned is a job, the one that failed is none.
    assert enqueued == 2 * PREPARE_AFTER + 3
    assert job_counts(db, schema) == {"pending": enqueued}


def test_with_prepared_statements_off_clients_share_the_pooler(
    pooled_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    first = pooled_app(pooled_dsn, schema, prepared_statements=False)
    second = pooled_app(pooled_dsn, schema, prepared_statements=False)
    try:
        for n in range(4 * PREPARE_AFTER):
            first.tasks["note"].enqueue(n=n)
            second.tasks["note"].enqueue(n=n)
        first.enqueue_many("note", [{"n": n} for n in range(50)])

        async def from_async_clients() -> None:
            try:
                for n in range(4 * PREPARE_AFTER):
                    await first.tasks["note"].enqueue_async(n=n)
                    await second.tasks["note"].enqueue_async(n=n)
            finally:
                await first.close_async()
                await second.close_async()

        asyncio.run(from_async_clients())
        # Administration through the pooler too.
        for _ in range(2 * PREPARE_AFTER):
            second.sync_client.set_paused("pooled", True)
            first.sync_client.set_paused("pooled", False)
            listed = first.sync_client.list_jobs(queue="pooled", limit=1000)
            counts = second.sync_client.counts()
        assert len(listed) == 16 * PREPARE_AFTER + 50
        assert counts == [("pooled", "pending", 16 * PREPARE_AFTER + 50)]
        assert first.sync_client.queue_status()[0]["pending"] == 16 * PREPARE_AFTER + 50
    finally:
        first.close()
        second.close()
    assert job_counts(db, schema) == {"pending": 16 * PREPARE_AFTER + 50}
    paused = db.execute(
        psycopg.sql.SQL("SELECT paused FROM {}.queues WHERE name = 'pooled'").format(
            psycopg.sql.Identifier(schema)
        )
    ).fetchall()
    assert paused == [(False,)]


def test_the_environment_turns_prepared_statements_off(
    monkeypatch: pytest.MonkeyPatch, pooled_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    monkeypatch.setenv("SKIPLOCK_PREPARED_STATEMENTS", "off")
    first, second = pooled_app(pooled_dsn, schema), pooled_app(pooled_dsn, schema)
    assert not first.prepared_statements
    try:
        for n in range(3 * PREPARE_AFTER):
            first.tasks["note"].enqueue(n=n)
            second.tasks["note"].enqueue(n=n)
    finally:
        first.close()
        second.close()
    assert job_counts(db, schema) == {"pending": 6 * PREPARE_AFTER}


def test_enqueue_in_the_callers_transaction_through_the_pooler(
    pooled_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    app = pooled_app(pooled_dsn, schema, prepared_statements=False)
    note = app.tasks["note"]
    # The caller's own connection: its prepared statements are the caller's to turn off.
    with psycopg.connect(pooled_dsn, prepare_threshold=None) as conn:
        for n in range(2 * PREPARE_AFTER):
            with conn.transaction():
                conn.execute("SELECT 1")  # the caller's own write would be here
                note.enqueue(n=n, conn=conn)
        with pytest.raises(RuntimeError), conn.transaction():
            note.enqueue(n=-1, conn=conn)
            raise RuntimeError("the caller's transaction fails: its job goes with it")
    app.close()
    assert job_counts(db, schema) == {"pending": 2 * PREPARE_AFTER}


def test_migrations_through_the_pooler(pooled_dsn: str, db: psycopg.Connection[Any]) -> None:
    schema = f"pooled_{secrets.token_hex(4)}"
    app = App(pooled_dsn, schema, prepared_statements=False)
    try:
        assert app.migrate() == [m.version for m in all_migrations()]
        assert app.migrate() == []  # recorded: the second run has nothing to do
        assert app.sync_client.pending_migrations() == []
    finally:
        app.sync_client.drop_schema()
        app.close()
    gone = db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [schema])
    assert gone.fetchone() == (0,)


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_worker_drains_through_the_pooler(
    model: str, roomy_pooled_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    app = pooled_app(roomy_pooled_dsn, schema, prepared_statements=False)
    task, queue = ("note", "pooled") if model == "lease" else ("note_held", "pooled_held")
    jobs = 300 if model == "lease" else 60
    app.enqueue_many(task, [{"n": n} for n in range(jobs)])
    # No LISTEN through a transaction pooler; a burst worker ends when the queue is empty.
    worker = Worker(
        app, queues=[queue], concurrency=3, burst=True, listen=False, poll_interval=0.05
    )
    assert worker._claims_held([queue]) is (model == "held")
    try:
        stats = asyncio.run(worker.run())
    finally:
        app.close()
    assert (stats.claimed, stats.done, stats.retried, stats.failed) == (jobs, jobs, 0, 0)
    assert job_counts(db, schema) == {"done": jobs}
    attempts = db.execute(
        psycopg.sql.SQL("SELECT max(attempts), min(attempts) FROM {}.jobs").format(
            psycopg.sql.Identifier(schema)
        )
    ).fetchone()
    assert attempts == (1, 1)


def test_a_held_lock_worker_keeps_a_concurrency_limit_through_the_pooler(
    roomy_pooled_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """The claim's serialising transaction and the job's slot lock are transaction-scoped, so
    they hold through a transaction pooler."""
    app = App(roomy_pooled_dsn, schema, prepared_statements=False)
    gauge = RunningPeak()

    @app.task(name="nap", queue="limited_held", model="held")
    def nap(n: int) -> None:
        with gauge.running():
            time.sleep(0.02)

    app.sync_client.set_concurrency_limit("limited_held", 2)
    nap.enqueue_many([{"n": n} for n in range(30)])
    worker = Worker(app, concurrency=3, burst=True, listen=False, poll_interval=0.05)
    try:
        stats = asyncio.run(worker.run())
    finally:
        app.close()
    assert (stats.done, stats.failed) == (30, 0)
    assert gauge.peak == 2, f"{gauge.peak} running at once in a queue limited to 2"
    assert job_counts(db, schema) == {"done": 30}


@pytest.mark.parametrize("prepare", [True, False], ids=["prepared", "unprepared"])
def test_the_listener_tells_a_transaction_pooler_and_what_else_to_set(
    prepare: bool,
    pooled_dsn: str,
    schema: str,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(listener, "PROBE_TIMEOUT", 0.5)
    caplog.set_level(logging.INFO, logger="skiplock")
    store = async_store(schema)

    async def listen(dsn: str) -> bool | None:
        heard = Listener(dsn, store, {"pooled"}, lambda: None, prepare=prepare)
        running = asyncio.create_task(heard.run())
        await asyncio.sleep(1.0)
        await cancel_and_wait([running])
        return heard.works

    assert asyncio.run(listen(pg_dsn)) is True  # directly: the probe comes back
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert asyncio.run(listen(pooled_dsn)) is False
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "does not reach this worker" in errors[0]
    assert ("SKIPLOCK_PREPARED_STATEMENTS=off" in errors[0]) is prepare
