"""PostgreSQL's claimer (:class:`~skiplock.backends.claimer.Claimer`): a worker's claims on
the tuned path, with the state they keep from one claim to the next.

- The connection: claims run one at a time, so the claimer keeps one connection of the
  worker's pool instead of taking one per claim (docs/design.md, "The claim connection").  A
  claim that fails gives it back (the pool replaces a broken one); when the connection was
  lost, the claim runs once more at once, on a new one.
- The claim cursor: where each queue's next claim starts reading the claim index
  (:mod:`skiplock._runtime.claim_cursor`), and the queues' weights.
- Keys with limits: their jobs are claimed first, within their limits and no more than the
  worker could start now, only while some key has limits (the worker's reading of it), going
  on from the key the last such claim ended at.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from skiplock._db.store_async import AsyncStore
from skiplock._runtime.claim_cursor import RESCAN_SHARE
from skiplock.backends.claimer import ClaimerSettings
from skiplock.errors import SkiplockError
from skiplock.job import Job

log = logging.getLogger("skiplock.worker")

# Seconds the plain claim of a worker's queues waits, while the claim of limited keys brings
# jobs, after it came back empty: at least this, and at least enough for that claim's walk of
# the limited jobs to take no more than RESCAN_SHARE of the time.
PLAIN_CLAIM_PAUSE = 1.0


class PostgresClaimer:
    def __init__(self, store: AsyncStore, pool: AsyncConnectionPool, settings: ClaimerSettings):
        self.store = store
        self.pool = pool
        self.settings = settings
        self.worker_id = settings.worker_id
        self.lease_seconds = settings.lease_seconds
        self.conn: AsyncConnection[Any] | None = None  # kept from one claim to the next
        self.after_key: str | None = None  # where the next claim of limited keys goes on
        self.plain_at = 0.0  # the plain claim waits until then while limited keys bring jobs

    async def claim(self, queues: Sequence[str], limit: int, startable: int) -> list[Job]:
        for attempt in range(2):
            if self.conn is None:
                self.conn = await self.pool.getconn()
            conn = self.conn
            try:
                return await self._claim_on(conn, queues, limit, startable)
            except BaseException as exc:
                await self.close()
                # The kept connection may have died while idle (a server restart, an idle
                # timeout, a dropped TCP connection): claim once more, at once, on a new one.
                failed = isinstance(exc, psycopg.Error | SkiplockError)
                if attempt or not (failed and conn.broken):
                    raise
                log.info("the claim connection was lost (%s); claiming on a new one", exc)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _claim_on(
        self, conn: AsyncConnection[Any], queues: Sequence[str], limit: int, startable: int
    ) -> list[Job]:
        settings = self.settings
        jobs: list[Job] = []
        keys_limited = settings.keys_limited is None or settings.keys_limited()
        if keys_limited:
            # Jobs of limited keys first (they are few by their limits) and no more than the
            # slots can start now, as for a limited queue; the other claims pass them over.
            jobs, self.after_key = await self.store.job_claim_key_limited(
                conn, queues, startable, self.worker_id, self.lease_seconds,
                after_key=self.after_key,
            )  # fmt: skip
        keyed = bool(jobs)
        if len(jobs) < limit and time.monotonic() >= self.plain_at:
            cursor = settings.cursor
            after = cursor.start() if cursor is not None else None
            want = limit - len(jobs)
            began = time.monotonic()
            claimed = await self.store.job_claim(
                conn, queues, want, self.worker_id, self.lease_seconds, after=after,
                weights=settings.weights,
            )  # fmt: skip
            if cursor is not None:
                cursor.advance(claimed, want)
            jobs += claimed
            if keyed and not claimed:
                # Limited keys have work and nothing else came: their jobs may fill the claim
                # index, which the plain claim walks and passes over one by one, so it waits
                # while the limited keys keep bringing jobs (docs/design.md, "Limits per key"),
                # the longer the longer that walk took.
                now = time.monotonic()
                walk = (now - began) * (1 / RESCAN_SHARE - 1)
                self.plain_at = now + max(PLAIN_CLAIM_PAUSE, walk)
        return jobs

    async def close(self) -> None:
        """Give the claim connection back to the pool (after a failed claim, at shutdown)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            await self.pool.putconn(conn)
