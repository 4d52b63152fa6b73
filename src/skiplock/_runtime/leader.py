"""Leader election in PostgreSQL: one worker at a time holds a role, with failover.

The role is a row in ``leaders`` with an expiry.  The holder renews it every ``ttl / 3``
seconds; when the holder dies, the row expires and the next worker to try takes it, so
maintenance moves within about ``ttl`` seconds.  A clean shutdown resigns at once.
"""

from __future__ import annotations

import asyncio
import logging

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
        self.is_leader: bool = False
        self.changed: asyncio.Event = asyncio.Event()

    async def try_acquire(self) -> bool:
        """Take or renew the role once; on a database error we stop counting ourselves leader."""
        try:
            async with self.pool.connection() as conn:
                leader = await self.store.leader_acquire(conn, self.role, self.holder, self.ttl)
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("leader election failed: %s", exc)
            leader = False
        if leader != self.is_leader:
            self.is_leader = leader
            self.changed.set()
            log.info(
                "%s %s the %s leader",
                self.holder,
                "is now" if leader else "is no longer",
                self.role,
            )
        return leader

    async def run(self) -> None:
        while True:
            await self.try_acquire()
            await asyncio.sleep(self.ttl / 3)

    async def resign(self) -> None:
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            async with self.pool.connection() as conn:
                await self.store.leader_resign(conn, self.role, self.holder)
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("could not resign leadership (it expires by itself): %s", exc)
