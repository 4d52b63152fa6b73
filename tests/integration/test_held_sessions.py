"""A held-lock job whose session ended while it ran is stopped: its transaction rolled back with
the claim, so the job is claimable again (another worker may already run it), and its outcome
can no longer be written.  Found by looking at the connection, no round trip; a real Worker on
a real server, the session ended by ``pg_terminate_backend`` or by
``idle_in_transaction_session_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from helpers.polling import wait_for_async
from skiplock import App, Worker
from skiplock._runtime.held_sessions import session_ended


def terminate(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


def held_job_pid(dsn: str) -> int | None:
    """The backend of the one held-lock transaction running (it wrote its claim: it has an xid)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'idle in transaction' AND backend_xid IS NOT NULL"
        ).fetchall()
    return rows[0][0] if len(rows) == 1 else None


def held_worker(app: App) -> Worker:
    """One slot: the job, claimable again once its session ended, waits for the first run to
    stop (a second slot would claim it again, which stops the first run too)."""
    return Worker(app, concurrency=1, model="held", poll_interval=0.1, listen=False)


def test_session_ended_is_seen_without_a_round_trip_only_on_an_idle_transaction(
    pg_dsn: str,
) -> None:
    async def scenario() -> None:
        conn = await psycopg.AsyncConnection.connect(pg_dsn)
        async with conn:
            assert not session_ended(conn)  # idle, no transaction
            await conn.execute("SELECT 1")  # a transaction, idle in it
            assert not session_ended(conn)
            async with conn.lock:  # as while a statement runs: the connection is left alone
                await asyncio.to_thread(terminate, pg_dsn, conn.info.backend_pid)
                await asyncio.sleep(0.2)
                assert not session_ended(conn) and not conn.closed
            await wait_for_async(lambda: session_ended(conn), 5)
            assert conn.closed

        other = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
        async with other:  # ended while idle outside a transaction: not a held-lock job's
            await asyncio.to_thread(terminate, pg_dsn, other.info.backend_pid)
            await asyncio.sleep(0.2)
            assert not session_ended(other)

    asyncio.run(scenario())


def test_a_held_async_job_whose_session_was_terminated_is_cancelled_and_runs_again(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[int] = []
    cancelled: list[float] = []
    first_started = asyncio.Event()

    @app.task(name="long", pass_context=True)
    async def long(ctx: Any) -> None:
        runs.append(ctx.job.attempts)
        if len(runs) > 1:
            return
        first_started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(time.monotonic())
            raise

    async def main() -> tuple[int, Worker, float]:
        job_id = long.enqueue().id
        worker = held_worker(app)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(first_started.wait(), 15)
        pid = await asyncio.to_thread(held_job_pid, app.dsn)
        assert pid is not None
        await asyncio.to_thread(terminate, app.dsn, pid)
        ended = time.monotonic()
        await wait_for_async(lambda: worker.stats.done == 1, 15, lambda: (runs, worker.stats))
        worker.stop()
        await asyncio.wait_for(running, 15)
        return job_id, worker, cancelled[0] - ended if cancelled else -1.0

    with caplog.at_level(logging.WARNING, logger="skiplock"):
        job_id, worker, stopped_after = asyncio.run(main())
    assert runs == [1, 2] and len(cancelled) == 1, (runs, cancelled)
    assert 0 <= stopped_after < 2.5, stopped_after  # within about a second (the watch's turn)
    assert (worker.stats.lost, worker.stats.done) == (1, 1)
    assert f"job {job_id} attempt 1: its held-lock session ended" in caplog.text
    assert "stopping it" in caplog.text
    job = app.get_job(job_id)  # the dead start was counted by the next claim
    assert job is not None and (job.status, job.attempts) == ("done", 2)


def test_a_held_sync_job_whose_session_timed_out_is_told_through_ctx_cancelled(
    pg_dsn: str, schema: str
) -> None:
    """``idle_in_transaction_session_timeout`` (docs/security.md advises it, to bound a runaway
    held-lock job) ends the session of a job that runs longer; the task is told."""
    runs: list[int] = []
    told = threading.Event()
    dsn = make_conninfo(pg_dsn, options="-c idle_in_transaction_session_timeout=1000")
    app = App(dsn, schema)

    @app.task(name="slow", pass_context=True)
    def slow(ctx: Any) -> None:
        runs.append(ctx.job.attempts)
        if len(runs) > 1:
            return
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if ctx.cancelled.is_set():
                told.set()
                return
            time.sleep(0.02)

    async def main() -> tuple[int, Worker]:
        job_id = slow.enqueue().id
        worker = held_worker(app)
        running = asyncio.create_task(worker.run())
        await wait_for_async(lambda: worker.stats.done == 1, 20, lambda: (runs, worker.stats))
        worker.stop()
        await asyncio.wait_for(running, 15)
        return job_id, worker

    try:
        job_id, worker = asyncio.run(main())
        job = app.get_job(job_id)
    finally:
        app.close()
    assert told.is_set() and runs == [1, 2], runs
    assert (worker.stats.lost, worker.stats.done) == (1, 1)
    assert job is not None and (job.status, job.attempts) == ("done", 2)
