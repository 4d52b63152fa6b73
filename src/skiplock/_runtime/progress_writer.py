"""The worker's writer of its running jobs' progress (see :mod:`skiplock._runtime.progress`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg
from psycopg_pool import AsyncConnectionPool

from skiplock._db.records import ProgressReport
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.running import RunningJob
from skiplock.errors import SkiplockError

log = logging.getLogger("skiplock.worker")

WRITE_INTERVAL = 1.0  # seconds: at most one write a job per interval


class ProgressWriter:
    """Writes the running jobs' new progress once every WRITE_INTERVAL seconds."""

    def __init__(
        self,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        running: Callable[[], list[RunningJob]],
        interval: float = WRITE_INTERVAL,
    ) -> None:
        self.store = store
        self.pool = pool
        self.running = running
        self.interval = interval

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.write()

    async def write(self) -> set[int]:
        reports: list[ProgressReport] = []
        for r in self.running():
            slot = r.progress_slot_if_made
            if slot is None or r.claim_gone:
                continue
            pending = slot.take()
            if pending is None:
                continue
            held_pid = None
            if r.model == "held":
                if r.conn is None or r.conn.closed:
                    continue
                held_pid = r.conn.info.backend_pid
            reports.append(ProgressReport(r.job.claim, pending[0], pending[1], held_pid))
        if not reports:
            return set()
        try:
            async with self.pool.connection() as conn:
                return await self.store.job_progress_write(conn, reports)
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("progress write failed: %s", exc)
            return set()
