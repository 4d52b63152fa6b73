"""The leasing worker's claims: its queues without limits through the backend's claimer
(:mod:`skiplock.backends.claimer`; PostgreSQL's keeps the tuned path), then each queue with a
concurrency limit of its own apart, only for slots that can start now.

Queue limits are PostgreSQL's, beyond the backend contract (docs/backends.md): a limited
queue is claimed on the app's database, on a connection of the worker's pool taken for that
claim.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from psycopg_pool import AsyncConnectionPool

from skiplock._db.queue_locks import QueueLockWaits
from skiplock._db.records import LimitedClaim
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.claim_cursor import ClaimCursor
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.queue_turns import QueueTurns
from skiplock.backends.base import Backend
from skiplock.backends.claimer import ClaimerSettings, claimer_of
from skiplock.errors import QueueLockBusy
from skiplock.job import Job


class LeasedClaims:
    def __init__(
        self,
        backend: Backend,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        settings: QueueSettings,
        cursor: ClaimCursor,
        queue_lock_waits: QueueLockWaits,
        *,
        worker_id: str,
        lease_seconds: float,
        weights: Mapping[str, int] | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.settings = settings
        self.queue_lock_waits = queue_lock_waits
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.turns = QueueTurns(weights)
        self.claimer = claimer_of(
            backend,
            ClaimerSettings(
                worker_id,
                lease_seconds,
                weights=self.turns.weights,
                cursor=cursor,
                keys_limited=lambda: settings.keys_limited,
            ),
        )
        # Where the next claim of limited keys' jobs goes on, in each queue with limits.
        self.queue_after_key: dict[str, str | None] = {}

    async def round_trip(self, wait: float) -> float:
        """Seconds an empty statement takes on a connection of the worker's pool (waited for
        at most ``wait`` seconds: PoolTimeout after that)."""
        async with self.pool.connection(timeout=wait) as conn:
            sent = time.monotonic()
            await AsyncConnectionPool.check_connection(conn)
            return time.monotonic() - sent

    async def claim(self, queues: list[str], limit: int, startable: Callable[[], int]) -> list[Job]:
        """Up to ``limit`` jobs, leased; from queues with a concurrency limit, and of keys with
        limits, no more than ``startable()``, the jobs the slots could start now."""
        limits = self.settings.limits
        unlimited = self.turns.next([q for q in queues if q not in limits])
        # A queue with a concurrency limit gets no more than the slots can start now: a job
        # waiting here would count against its limit while other workers' slots sit idle.
        limit_startable = min(limit, startable())
        jobs: list[Job] = []
        if unlimited:
            jobs = await self.claimer.claim(unlimited, limit, limit_startable)
        limited = [q for q in queues if q in limits]
        if limited and len(jobs) < limit_startable:
            async with self.pool.connection() as conn:
                for queue in limited:
                    if len(jobs) >= limit_startable:
                        break
                    claim = LimitedClaim(
                        queue,
                        limits[queue],
                        self.worker_id,
                        self.lease_seconds,
                        want=limit_startable - len(jobs),
                        lock_wait=self.queue_lock_waits.wait_for(queue),
                        keys_limited=self.settings.keys_limited,
                        after_key=self.queue_after_key.get(queue),
                    )
                    try:
                        (
                            claimed,
                            self.queue_after_key[queue],
                        ) = await self.store.job_claim_limited_with_keys(conn, claim)
                    except QueueLockBusy as busy:  # that queue waits; the jobs claimed so far run
                        self.queue_lock_waits.busy(busy)
                    else:
                        self.queue_lock_waits.free(queue)
                        jobs += claimed
        return jobs

    async def release(self) -> None:
        """Let go of the claimer's connection (at shutdown)."""
        await self.claimer.close()
