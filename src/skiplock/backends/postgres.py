"""PostgreSQL as a :class:`~skiplock.backends.base.Backend`: an adapter over the store
(:class:`skiplock._db.store_async.AsyncStore`).  It adds no SQL: each method runs the store's
statements, on a pooled connection, or on the caller's for an enqueue in a transaction.

An ``App`` makes one on its own async client (:meth:`PostgresBackend.on_client`: no second
pool); a worker runs its leased jobs' writes on a view of it over the worker's own pool
(:meth:`PostgresBackend.on_pool`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from skiplock._db.caller_connection import AsyncCallerConnection
from skiplock._db.client_async import AsyncClient
from skiplock._db.enqueue import NewJob, NewJobs
from skiplock._db.records import FailedAttempt, Snooze, TaskResult
from skiplock._db.sql import Queries
from skiplock._db.store_async import AsyncStore
from skiplock.backends.base import Backend, CancelOutcome, Completion
from skiplock.backends.claimer import Claimer, ClaimerSettings, PlainClaimer
from skiplock.backends.postgres_claimer import PostgresClaimer
from skiplock.job import Claim, Enqueued, Job, JobStatus


class PostgresBackend:
    """The jobs table of schema ``schema`` (migrated: ``App(dsn, schema).migrate()``) at
    ``dsn``.  ``prepared_statements=False`` behind a transaction-mode pooler (see ``App``)."""

    def __init__(
        self, dsn: str, schema: str = "skiplock", *, prepared_statements: bool = True
    ) -> None:
        store = AsyncStore(Queries(schema))
        self._setup(AsyncClient(lambda: dsn, store, prepare=prepared_statements), owns=True)

    def _setup(self, client: AsyncClient, *, owns: bool) -> None:
        self.schema: str = client.store.schema
        self._client = client
        self._store: AsyncStore = client.store
        self._owns = owns  # close() closes the client's pool
        # Where the writes about claimed jobs run: the client's pool, or a worker's.
        self._connection: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]]
        self._connection = client.connection
        self._pool: AsyncConnectionPool | None = None  # a worker's (on_pool), for its claimer

    @classmethod
    def on_client(cls, client: AsyncClient) -> PostgresBackend:
        """A backend on ``client``'s store and pool (an App's); :meth:`close` leaves them open."""
        backend = cls.__new__(cls)
        backend._setup(client, owns=False)
        return backend

    def on_pool(
        self, pool: AsyncConnectionPool, store: AsyncStore | None = None
    ) -> PostgresBackend:
        """This backend with its claims, leases and outcomes on ``pool`` (a worker's, sized
        for them), through ``store`` when given (the worker's, on the same schema); enqueues
        and reads stay on this one's.  Closing it closes neither."""
        view = PostgresBackend.on_client(self._client)
        view._connection = pool.connection
        view._pool = pool
        if store is not None:
            view._store = store
        return view

    async def enqueue(
        self,
        jobs: Sequence[NewJob] | NewJobs,
        *,
        transaction: AsyncCallerConnection | None = None,
    ) -> list[Enqueued]:
        if isinstance(jobs, NewJobs):  # one call's jobs: one statement for them all
            return await self._client.enqueue_batch(jobs, transaction)
        return await self._client.enqueue_many(jobs, transaction)

    async def claim(
        self, queues: Sequence[str], limit: int, worker: str, lease_seconds: float
    ) -> list[Job]:
        async with self._connection() as conn:
            # Jobs of keys with limits (client.set_key_limit) first, within their limits; the
            # plain claim passes them over.
            limited, _ = await self._store.job_claim_key_limited(
                conn, queues, limit, worker, lease_seconds
            )
            rest = await self._store.job_claim(
                conn, queues, limit - len(limited), worker, lease_seconds
            )
            return limited + rest

    def claimer(self, settings: ClaimerSettings) -> Claimer:
        """A worker's claimer: on a worker's pool (:meth:`on_pool`), the tuned claim
        (:class:`~skiplock.backends.postgres_claimer.PostgresClaimer`: its kept connection,
        claim cursor and queue weights, the claim of limited keys only while some key has
        limits); elsewhere, :meth:`claim` each time."""
        if self._pool is None:
            return PlainClaimer(self, settings)
        return PostgresClaimer(self._store, self._pool, settings)

    async def extend(
        self, claims: Sequence[Claim], lease_seconds: float, *, now: datetime | None = None
    ) -> dict[int, bool]:
        async with self._connection() as conn:
            return await self._store.job_extend_leases(conn, claims, lease_seconds, now)

    async def reclaim_expired(self, *, now: datetime | None = None) -> dict[int, JobStatus]:
        async with self._connection() as conn:
            reclaimed = await self._store.job_reclaim_expired(conn, now=now)
        return {job_id: JobStatus(status) for job_id, status in reclaimed.items()}

    async def complete(
        self, done: Sequence[Claim | TaskResult], *, completion: Completion = "keep"
    ) -> set[int]:
        results = [d for d in done if isinstance(d, TaskResult)]
        claims = [d for d in done if not isinstance(d, TaskResult)]
        async with self._connection() as conn:
            if not results:  # the common case: one statement, no transaction around it
                return await self._store.job_finish_many(conn, claims, completion)
            if not claims and completion != "archive":
                return await self._store.job_finish_with_results_many(conn, results, completion)
            # One transaction: all or none (archiving with results takes two statements).
            owned: set[int] = set()
            async with conn.transaction():
                if claims:
                    owned |= await self._store.job_finish_many(conn, claims, completion)
                owned |= await self._store.job_finish_with_results_many(conn, results, completion)
            return owned

    async def fail(self, failures: Sequence[FailedAttempt]) -> dict[int, JobStatus]:
        async with self._connection() as conn:
            failed = await self._store.job_fail_many(conn, failures)
        return {job_id: JobStatus(status) for job_id, status in failed.items()}

    async def snooze(self, snoozes: Sequence[Snooze]) -> set[int]:
        async with self._connection() as conn:
            return await self._store.job_snooze_many(conn, snoozes)

    async def cancel_claimed(self, claims: Sequence[Claim]) -> set[int]:
        async with self._connection() as conn:
            return await self._store.job_cancel_claimed_many(conn, claims)

    async def release(self, claims: Sequence[Claim]) -> set[int]:
        async with self._connection() as conn:
            return await self._store.job_release_many(conn, claims)

    async def promote_due(self, *, now: datetime | None = None) -> dict[str, int]:
        async with self._connection() as conn:
            return await self._store.job_promote_due(conn, now=now)

    async def cancel(self, job_id: int) -> CancelOutcome:
        answer = await self._client.cancel_or_request(job_id)
        if answer == "cancelled":
            return "cancelled"
        if answer == "unchanged":
            return "unchanged"
        return "requested"  # "requested", or "held": a held-lock job's worker is asked apart

    async def get_job(self, job_id: int) -> Job | None:
        return await self._client.get_job(job_id)

    async def set_key_limit(
        self,
        key: str,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        period: float = 1.0,
    ) -> None:
        await self._client.set_key_limit(key, concurrency=concurrency, rate=rate, period=period)

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: JobStatus | None = None,
        task: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[Job]:
        return await self._client.list_jobs(
            queue=queue, status=status, task=task, limit=limit, before=before
        )

    async def close(self) -> None:
        if self._owns:
            await self._client.close()


if TYPE_CHECKING:  # mypy checks that the adapter keeps the contract, signature by signature
    _conforms: type[Backend] = PostgresBackend
