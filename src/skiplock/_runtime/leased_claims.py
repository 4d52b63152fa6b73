"""The leasing worker's claim statements: one claim across its queues (a queue with a
concurrency limit claimed apart, and jobs whose limit_key has limits, both only for slots that
can start now), each committed at once.

Claims run one at a time, so they keep one connection of the pool instead of taking one per
claim (see docs/design.md, "The claim connection").  A claim that fails gives it back (the pool
replaces a broken one); when the connection was lost, the claim runs once more at once, on a
new one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from skiplock._db.queue_locks import QueueLockWaits
from skiplock._db.records import LimitedClaim
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.claim_cursor import RESCAN_SHARE, ClaimCursor
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.queue_turns import QueueTurns
from skiplock.errors import QueueLockBusy, SkiplockError
from skiplock.job import Job

log = logging.getLogger("skiplock.worker")

# Seconds the plain claim of a worker's queues waits, while the claim of limited keys brings
# jobs, after it came back empty: at least this, and at least enough for that claim's walk of
# the limited jobs to take no more than RESCAN_SHARE of the time.
PLAIN_CLAIM_PAUSE = 1.0


class LeasedClaims:
    def __init__(
        self,
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
        self.cursor = cursor
        self.queue_lock_waits = queue_lock_waits
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.conn: AsyncConnection[Any] | None = None  # kept from one claim to the next
        self.turns = QueueTurns(weights)
        self.after_key: str | None = None  # where the next claim of limited keys goes on
        # The same, for the limited keys' jobs of each queue with limits of its own.
        self.queue_after_key: dict[str, str | None] = {}
        self.plain_at = 0.0  # the plain claim waits until then while limited keys bring jobs

    async def claim(self, queues: list[str], limit: int, startable: Callable[[], int]) -> list[Job]:
        """Up to ``limit`` jobs, leased; from queues with a concurrency limit no more than
        ``startable()``, the jobs the slots could start now."""
        for attempt in range(2):
            if self.conn is None:
                self.conn = await self.pool.getconn()
            conn = self.conn
            try:
                return await self._claim_on(conn, queues, limit, startable)
            except BaseException as exc:
                await self.release()
                # The kept connection may have died while idle (a server restart, an idle
                # timeout, a dropped TCP connection): claim once more, at once, on a new one.
                failed = isinstance(exc, psycopg.Error | SkiplockError)
                if attempt or not (failed and conn.broken):
                    raise
                log.info("the claim connection was lost (%s); claiming on a new one", exc)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _claim_on(
        self,
        conn: AsyncConnection[Any],
        queues: list[str],
        limit: int,
        startable: Callable[[], int],
    ) -> list[Job]:
        limits = self.settings.limits
        unlimited = self.turns.next([q for q in queues if q not in limits])
        # A queue with a concurrency limit gets no more than the slots can start now: a job
        # waiting here would count against its limit while other workers' slots sit idle.
        limit_startable = min(limit, startable())
        jobs: list[Job] = []
        if unlimited and self.settings.keys_limited:
            # Jobs of limited keys first (they are few by their limits) and no more than the
            # slots can start now, as for a limited queue; the other claims pass them over.
            jobs, self.after_key = await self.store.job_claim_key_limited(
                conn, unlimited, limit_startable, self.worker_id, self.lease_seconds,
                after_key=self.after_key,
            )  # fmt: skip
        keyed = bool(jobs)
        if unlimited and len(jobs) < limit and time.monotonic() >= self.plain_at:
            after = self.cursor.start()
            want = limit - len(jobs)
            began = time.monotonic()
            claimed = await self.store.job_claim(
                conn, unlimited, want, self.worker_id, self.lease_seconds, after=after,
                weights=self.turns.weights,
            )  # fmt: skip
            self.cursor.advance(claimed, want)
            jobs += claimed
            if keyed and not claimed:
                # Limited keys have work and nothing else came: their jobs may fill the claim
                # index, which the plain claim walks and passes over one by one, so it waits
                # while the limited keys keep bringing jobs (docs/design.md, "Limits per key"),
                # the longer the longer that walk took.
                now = time.monotonic()
                walk = (now - began) * (1 / RESCAN_SHARE - 1)
                self.plain_at = now + max(PLAIN_CLAIM_PAUSE, walk)
        for queue in (q for q in queues if q in limits):
            if len(jobs) >= limit_startable:
                break
            try:
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
                claimed, self.queue_after_key[queue] = await self.store.job_claim_limited_with_keys(
                    conn, claim
                )
                jobs += claimed
            except QueueLockBusy as busy:  # that queue waits; the jobs claimed so far run
                self.queue_lock_waits.busy(busy)
            else:
                self.queue_lock_waits.free(queue)
        return jobs

    async def release(self) -> None:
        """Give the claim connection back to the pool (after a failed claim, at shutdown)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            await self.pool.putconn(conn)
