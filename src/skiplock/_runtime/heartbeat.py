"""The heartbeat: one statement per tick extends the leases of all of a worker's running jobs,
and reports which of them an admin asked to cancel and which were reclaimed (both stopped)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import psycopg
from psycopg_pool import AsyncConnectionPool

from skiplock._db.store_async import AsyncStore
from skiplock._runtime.running import RunningJob
from skiplock.errors import SkiplockError

log = logging.getLogger("skiplock.worker")


class Heartbeat:
    def __init__(
        self,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        lease_seconds: float,
        running: Callable[[], list[RunningJob]],
    ) -> None:
        self.store = store
        self.pool = pool
        self.lease_seconds = lease_seconds
        self.running = running

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            await self.beat()

    async def beat(self) -> None:
        leased = [r for r in self.running() if r.model == "lease"]
        if not leased:
            return
        sent = time.monotonic()
        try:
            async with self.pool.connection() as conn:
                kept = await self.store.job_extend_leases(
                    conn, [r.job.claim for r in leased], self.lease_seconds
                )
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("heartbeat failed: %s", exc)
            return
        for r in leased:
            if r.job.id not in kept:
                r.lease_lost()  # stops it, if it started
                continue
            r.lease_until = sent + self.lease_seconds
            if kept[r.job.id]:  # started, or waiting for a slot
                r.cancel_requested()
