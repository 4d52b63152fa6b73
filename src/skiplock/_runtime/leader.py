"""Leader election in PostgreSQL: one worker at a time holds a role, with failover.

The role is a row in ``leaders`` with an expiry.  The holder renews it every ``ttl / 3``
seconds; when the holder dies, the row expires and the next worker to try takes it, so
maintenance moves within about ``ttl`` seconds.  A clean shutdown resigns at once.
"""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg
from psycopg_pool import AsyncConnectionPool

from skiplock._db.store_async import AsyncStore
from skiplock.errors import SkiplockError

log = logging.getLogger("skiplock._runtime.leader")

MAINTENANCE = "maintenance"


class LeaderElector:
    def __init__(
        self,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        holder: str,
        *,
        role: str = MAINTENANCE,
        ttl: float = 10.0,
    ) -> None:
        self.store = store
        self.pool = pool
        self.holder = holder
        self.role = role
        self.ttl = ttl
        self._is_leader = False
        # When our term ends by our own clock: ``ttl`` after we sent the last renewal that
        # succeeded, no later than the row's expiry on the server
        # (docs/design.md, "A leader's term ends by its own clock").
        self._term_ends = 0.0
        self.changed: asyncio.Event = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        """Whether we hold the role now: renewed, and the term that renewal gave not over."""
        if self._is_leader and time.monotonic() >= self._term_ends:
            self._set(False, "its term ran out before a renewal got through")
        return self._is_leader

    def _set(self, leader: bool, why: str = "") -> None:
        if leader != self._is_leader:
            self._is_leader = leader
            self.changed.set()
            log.info(
                "%s %s the %s leader%s",
                self.holder,
                "is now" if leader else "is no longer",
                self.role,
                f" ({why})" if why else "",
            )

    async def try_acquire(self) -> bool:
        """Take or renew the role once; on a database error we stop counting ourselves leader."""
        sent = time.monotonic()
        try:
            async with self.pool.connection() as conn:
                leader = await self.store.leader_acquire(conn, self.role, self.holder, self.ttl)
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("leader election failed: %s", exc)
            leader = False
        if leader:
            self._term_ends = sent + self.ttl
        self._set(leader and time.monotonic() < self._term_ends)
        return self._is_leader

    async def run(self) -> None:
        while True:
            attempt = asyncio.ensure_future(self.try_acquire())
            try:
                # A renewal can wait long on a silent network: the term ends meanwhile.
                while not attempt.done():
                    left = self._term_ends - time.monotonic() if self._is_leader else None
                    await asyncio.wait({attempt}, timeout=None if left is None else max(left, 0))
                    _ = self.is_leader  # ends a term that has run out
            finally:
                if not attempt.done():
                    attempt.cancel()
            await asyncio.sleep(self.ttl / 3)

    async def resign(self) -> None:
        if not self._is_leader:
            return
        self._is_leader = False
        try:
            async with self.pool.connection() as conn:
                await self.store.leader_resign(conn, self.role, self.holder)
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("could not resign leadership (it expires by itself): %s", exc)
