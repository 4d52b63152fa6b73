"""The backends the conformance suite (tests/conformance/) runs against, each behind a
:class:`Harness`: how to open the backend (as often as a test wants: each one another worker's
or app's view of the same jobs), how to open it as a worker process holds it (its claimer's
backend), how to open a caller's transaction for it, and how to run a test's coroutine.  A new
backend adds a harness here and its name to ``HARNESSES``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any, Protocol

import psycopg

from skiplock._db.client_async import open_pool
from skiplock._db.connections import WORKER_POOL_MAX, WORKER_POOL_MIN
from skiplock._db.sql import Queries
from skiplock._db.store_async import AsyncStore
from skiplock.backends import Backend, NewJob, PostgresBackend, Transaction
from skiplock.job import Enqueued


class Harness(Protocol):
    name: str

    def backend(self) -> AbstractAsyncContextManager[Backend]:
        """A backend on the test's own store, closed at exit."""
        ...

    def worker_backend(self) -> AbstractAsyncContextManager[Backend]:
        """The backend as a worker process holds it (what its claimer and writes run on), on
        the test's own store, closed at exit."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """A caller's transaction for ``enqueue(transaction=...)``: committed at exit, rolled
        back when the block raises."""
        ...


class PostgresHarness:
    name = "postgres"

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema

    @asynccontextmanager
    async def backend(self) -> AsyncIterator[Backend]:
        backend = PostgresBackend(self.dsn, self.schema)
        try:
            yield backend
        finally:
            await backend.close()

    @asynccontextmanager
    async def worker_backend(self) -> AsyncIterator[Backend]:
        """On a pool of a worker's shape, as a worker's is (``PostgresBackend.on_pool``): its
        claimer is the tuned ``PostgresClaimer``."""
        backend = PostgresBackend(self.dsn, self.schema)
        pool = await open_pool(
            self.dsn,
            AsyncStore(Queries(self.schema)),
            min_size=WORKER_POOL_MIN,
            max_size=WORKER_POOL_MAX,
        )
        try:
            yield backend.on_pool(pool)
        finally:
            await pool.close()
            await backend.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        conn = await psycopg.AsyncConnection.connect(self.dsn)
        async with conn, conn.transaction():
            yield conn


HARNESSES = ["postgres"]


def run(harness: Harness, body: Callable[[Backend], Awaitable[None]]) -> None:
    """Run a test's coroutine on a backend of ``harness``, in an event loop of its own."""

    async def main() -> None:
        async with harness.backend() as backend:
            await body(backend)

    asyncio.run(main())


def new_job(
    *,
    queue: str = "q",
    task: str = "t",
    payload: dict[str, Any] | None = None,
    priority: int = 0,
    run_at: datetime | None = None,
    delay: float | None = None,
    max_attempts: int = 3,
    entity_key: str | None = None,
    idempotency_key: str | None = None,
    expires_at: datetime | None = None,
    fair_key: str | None = None,
    limit_key: str | None = None,
) -> NewJob:
    """A new job as the app builds it (validated, its payload JSON text)."""
    return NewJob(
        queue=queue,
        task=task,
        payload=json.dumps(payload or {}),
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        entity_key=entity_key,
        fair_key=fair_key,
        limit_key=limit_key,
        idempotency_key=idempotency_key,
        expires_at=expires_at,
    )


def check_claimed_once(
    taken: Sequence[Sequence[int]], plain: Sequence[Enqueued], same_key: Sequence[Enqueued]
) -> None:
    """What concurrent claimers took (``taken``, the ids each took): no job twice, every plain
    job, one of the jobs sharing an entity key (the others wait while it runs), and more than
    one claimer with jobs (else the race did not happen)."""
    every = [job_id for ids in taken for job_id in ids]
    assert len(every) == len(set(every)), "a job was handed to two claims"
    assert {e.id for e in plain} <= set(every)
    assert len(set(every) & {e.id for e in same_key}) == 1
    assert sum(1 for ids in taken if ids) > 1, "the claims did not overlap; test is moot"
