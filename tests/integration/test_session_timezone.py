"""skiplock's own connections read timestamps in UTC, whatever the server's or the DSN's time
zone: psycopg converts every other zone through zoneinfo, which took more than half of the
time it spent reading a claimed job's row.  Behind a transaction-mode pooler (no prepared
statements) skiplock sets nothing on the session, so timestamps come in the session's own zone;
the instants are the same.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from skiplock import App, Job, JobContext, Worker

BERLIN = "Europe/Berlin"


@pytest.fixture
def berlin_dsn(pg_dsn: str) -> str:
    """The test server, with sessions in Berlin time unless told otherwise."""
    return make_conninfo(pg_dsn, options=f"-c TimeZone={BERLIN}")


def timestamps(job: Job) -> list[datetime]:
    stamps = [job.run_at, job.created_at, job.locked_at, job.locked_until]
    return [stamp for stamp in stamps if stamp is not None]


def run_one_job(app: App) -> Job:
    """Enqueue a job and run it with a worker; the job as its handler saw it."""
    seen: list[Job] = []

    @app.task(name="t", pass_context=True)
    async def t(ctx: JobContext) -> None:
        seen.append(ctx.job)

    t.enqueue()
    asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    assert len(seen) == 1
    return seen[0]


def test_own_connections_read_timestamps_in_utc(berlin_dsn: str, schema: str) -> None:
    with psycopg.connect(berlin_dsn) as plain:  # the DSN does set the zone
        assert plain.info.parameter_status("TimeZone") == BERLIN
    app = App(berlin_dsn, schema)
    try:
        handled = run_one_job(app)
        assert len(timestamps(handled)) == 4
        assert all(stamp.tzinfo is UTC for stamp in timestamps(handled))
        read_sync = app.get_job(handled.id)

        async def get_job_async() -> Job | None:
            try:
                return await app.get_job_async(handled.id)
            finally:
                await app.close_async()  # its pool belongs to this event loop

        read_async = asyncio.run(get_job_async())
        for job in (read_sync, read_async):
            assert job is not None and job.created_at == handled.created_at
            assert all(stamp.tzinfo is UTC for stamp in timestamps(job))
        with app.sync_client.connection() as conn:
            assert conn.info.parameter_status("TimeZone") == "UTC"
    finally:
        app.close()


def test_a_held_lock_tasks_connection_is_in_utc(berlin_dsn: str, schema: str) -> None:
    app = App(berlin_dsn, schema)
    zones: list[tuple[str, str]] = []

    @app.task(name="held", model="held", pass_context=True)
    async def held(ctx: JobContext, local: str | None = None) -> None:
        assert ctx.conn is not None
        before = await (await ctx.conn.execute("SHOW TimeZone")).fetchone()
        if local is not None:
            await ctx.conn.execute(f"SET LOCAL TimeZone = '{local}'")
        after = await (await ctx.conn.execute("SHOW TimeZone")).fetchone()
        assert before is not None and after is not None
        zones.append((before[0], after[0]))

    try:
        held.with_options(priority=0).enqueue(local=BERLIN)  # SET LOCAL in its transaction
        held.with_options(priority=1).enqueue()  # then one after it, on one slot
        worker = Worker(app, burst=True, poll_interval=0.05, concurrency=1)
        asyncio.run(asyncio.wait_for(worker.run(), 30))
    finally:
        app.close()
    assert zones == [("UTC", BERLIN), ("UTC", "UTC")]


def test_behind_a_transaction_pooler_the_session_zone_is_left_alone(
    berlin_dsn: str, schema: str
) -> None:
    app = App(berlin_dsn, schema, prepared_statements=False)
    try:
        handled = run_one_job(app)
        assert all(stamp.tzinfo == ZoneInfo(BERLIN) for stamp in timestamps(handled))
        job: Any = app.get_job(handled.id)
        assert job.created_at.tzinfo == ZoneInfo(BERLIN)
        assert job.created_at.astimezone(UTC) == handled.created_at.astimezone(UTC)
    finally:
        app.close()
