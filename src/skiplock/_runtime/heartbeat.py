"""The heartbeat: one call of the backend (``extend``: one statement on PostgreSQL) per tick
extends the leases of all of a worker's running leased jobs, and reports which of them an admin
asked to cancel and which were reclaimed (both stopped)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import psycopg

from skiplock._runtime.running import RunningJob
from skiplock.backends.base import Backend
from skiplock.errors import SkiplockError

log = logging.getLogger("skiplock.worker")


class Heartbeat:
    def __init__(
        self,
        backend: Backend,
        lease_seconds: float,
        running: Callable[[], list[RunningJob]],
    ) -> None:
        self.backend = backend
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
            kept = await self.backend.extend([r.job.claim for r in leased], self.lease_seconds)
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
