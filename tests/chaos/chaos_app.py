"""The app the chaos workers run: every task records each execution in a ledger table.

Worker processes import this module through the CLI (``skiplock worker chaos_app:app``) with
``CHAOS_DSN``, ``CHAOS_SCHEMA`` and ``CHAOS_LEDGER_DSN`` set; the harness imports it without them
and calls :func:`build` to register the same tasks on its own ``App`` (to enqueue them).

The ledger is ``"<schema>".ledger``, written on a connection of the worker process's own (not
skiplock's), each statement in its own transaction: one row when a handler starts (job id,
attempt, worker id, pid, wall-clock time), completed with the end time and outcome (``ok`` or
``fail``) when it returns.  A row without an end is an execution that never returned (killed,
cancelled, frozen for good); a ``work`` job given ``note_stop`` also records when its handler
was cancelled (``stopped``).  Every row has a client-made token, so a statement retried after a
dropped connection never writes twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import time
from typing import Any

import psycopg

from skiplock import App, ExponentialBackoff, JobContext

QUEUE = "chaos"
LEDGER_RETRY_SECONDS = 90.0  # a handler keeps trying its ledger write through a server restart

# Scenario 7: a flaky task (its retry band is checked from the ledger) and the herd's task.
FLAKY_RETRY = ExponentialBackoff(base=0.5, factor=2.0, cap=8.0, jitter=0.25)
FLAKY_MAX_ATTEMPTS = 4
HERD_RETRY = ExponentialBackoff(base=4.0, factor=2.0, cap=60.0, jitter=0.5)

LEDGER_DDL = """
CREATE TABLE {ledger} (
    token   text PRIMARY KEY,
    job_id  bigint NOT NULL,
    attempt integer NOT NULL,
    worker  text NOT NULL,
    pid     integer NOT NULL,
    started float8 NOT NULL,
    ended   float8,
    outcome text,
    stopped float8
)
"""


class PlannedFailure(Exception):
    """The handler failing on purpose."""


class _Ledger:
    """One connection per worker process, used by one statement at a time."""

    def __init__(self) -> None:
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.lock: asyncio.Lock | None = None

    async def execute(self, query: str, params: tuple[Any, ...]) -> None:
        if self.lock is None:
            self.lock = asyncio.Lock()
        deadline = time.monotonic() + LEDGER_RETRY_SECONDS
        while True:
            async with self.lock:
                try:
                    if self.conn is None or self.conn.closed:
                        self.conn = await psycopg.AsyncConnection.connect(
                            os.environ["CHAOS_LEDGER_DSN"], autocommit=True, connect_timeout=3
                        )
                    await self.conn.execute(query, params)
                    return
                except psycopg.Error:
                    # Dropped connection (or one left mid-statement by a cancelled task).
                    if self.conn is not None:
                        await self.conn.close()
                    self.conn = None
                    if time.monotonic() > deadline:
                        raise
            await asyncio.sleep(0.2)


_ledger = _Ledger()


def _table() -> str:
    return '"{}".ledger'.format(os.environ["CHAOS_SCHEMA"])


async def record_start(ctx: JobContext) -> str:
    token = secrets.token_hex(8)
    await _ledger.execute(
        f"INSERT INTO {_table()} (token, job_id, attempt, worker, pid, started) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (token) DO NOTHING",
        (token, ctx.job.id, ctx.job.attempts, ctx.worker_id, os.getpid(), time.time()),
    )
    return token


async def record_end(token: str, outcome: str) -> None:
    await _ledger.execute(
        f"UPDATE {_table()} SET ended = %s, outcome = %s WHERE token = %s",
        (time.time(), outcome, token),
    )


async def record_stop(token: str) -> None:
    """The handler was cancelled: noted at once, or not at all (a stopping worker must not wait
    for the ledger)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(2.0):
            await _ledger.execute(
                f"UPDATE {_table()} SET stopped = %s WHERE token = %s", (time.time(), token)
            )


async def _execute(
    ctx: JobContext,
    ms: float,
    fail: float,
    fail_until: int = 0,
    note_stop: bool = False,
    linger_ms: float = 0.0,
) -> None:
    token = await record_start(ctx)
    try:
        await asyncio.sleep(ms / 1000)
    except asyncio.CancelledError:
        if note_stop:
            await record_stop(token)
        raise
    failing = ctx.job.attempts <= fail_until or (fail > 0 and random.random() < fail)
    await record_end(token, "fail" if failing else "ok")
    if linger_ms and ctx.job.attempts == 1:
        # The handler is over, as the ledger says, but its outcome is not written yet: what a
        # slow outcome write or commit (a loaded machine) looks like from the ledger.
        await asyncio.sleep(linger_ms / 1000)
    if failing:
        raise PlannedFailure(f"planned failure of job {ctx.job.id} attempt {ctx.job.attempts}")


def build(dsn: str, schema: str, periodic: bool = False) -> App:
    """An App on ``schema`` with the chaos tasks registered; with ``periodic``, also ``tick``,
    every second on queue ``periodic`` (tests/network/scenarios.py counts its runs)."""
    app = App(dsn, schema)

    if periodic:

        @app.periodic(every=1.0, name="tick", queue="periodic", pass_context=True)
        async def tick(ctx: JobContext) -> None:
            await _execute(ctx, 1.0, 0.0)

    @app.task(name="work", queue=QUEUE, max_attempts=25, pass_context=True)
    async def work(
        ctx: JobContext,
        ms: float = 10.0,
        fail: float = 0.0,
        fail_until: int = 0,
        note_stop: bool = False,
        linger_ms: float = 0.0,
    ) -> None:
        """Sleeps ``ms`` milliseconds; fails with probability ``fail``, and on purpose while its
        attempt is at most ``fail_until``; with ``note_stop``, a cancellation is recorded; with
        ``linger_ms``, its first attempt returns that long after the ledger records its end."""
        await _execute(ctx, ms, fail, fail_until, note_stop, linger_ms)

    @app.task(
        name="flaky",
        queue=QUEUE,
        max_attempts=FLAKY_MAX_ATTEMPTS,
        retry=FLAKY_RETRY,
        pass_context=True,
    )
    async def flaky(ctx: JobContext, ms: float = 10.0, fail: float = 0.3) -> None:
        await _execute(ctx, ms, fail)

    @app.task(name="herd", queue="herd", max_attempts=3, retry=HERD_RETRY, pass_context=True)
    async def herd(ctx: JobContext, ms: float = 2.0) -> None:
        await _execute(ctx, ms, 0.0)

    return app


app = (
    build(os.environ["CHAOS_DSN"], os.environ["CHAOS_SCHEMA"], "CHAOS_PERIODIC" in os.environ)
    if "CHAOS_DSN" in os.environ
    else None
)
