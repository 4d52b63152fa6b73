"""Progress of running jobs (``ctx.progress``): a task sets its job's slot, which costs no I/O;
the worker's writer sends the slots that changed once a second, all in one statement a model,
so a job is written at most once a second however often it reports.  A value set after the
last write of a job that then finishes is dropped with it: the outcome says more.  Why a side
table: docs/design.md, "Progress of a running job: a side table"."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg
from psycopg_pool import AsyncConnectionPool

from skiplock._db.records import ProgressReport
from skiplock.errors import SkiplockError

if TYPE_CHECKING:
    from skiplock._db.store_async import AsyncStore
    from skiplock._runtime.running import RunningJob

log = logging.getLogger("skiplock.worker")

STATUS_MAX_CHARS = 200  # the CHECK jobs_bound_progress_status of migration 0019
WRITE_INTERVAL = 1.0  # seconds: at most one write a job per interval


def checked_progress(progress: float, status: str | None) -> tuple[float, str | None]:
    """``progress`` as a float in 0..1 and ``status`` as at most STATUS_MAX_CHARS characters,
    or ValueError/TypeError: the table's CHECKs would refuse them, later and for the batch."""
    if isinstance(progress, bool) or not isinstance(progress, (int, float)):
        raise TypeError(f"progress must be a number from 0 to 1, got {progress!r}")
    value = float(progress)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"progress must be from 0 to 1, got {progress!r}")
    if status is not None:
        if not isinstance(status, str):
            raise TypeError(f"status must be a string, got {type(status).__name__}")
        if len(status) > STATUS_MAX_CHARS:
            raise ValueError(
                f"status must be at most {STATUS_MAX_CHARS} characters, got {len(status)}"
            )
        if "\x00" in status:
            raise ValueError("status must not contain NUL characters")
    return value, status


class ProgressSlot:
    """The last progress a job's task reported and not yet written (None: nothing new)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: tuple[float, str | None] | None = None

    def set(self, progress: float, status: str | None) -> None:
        with self._lock:
            self._pending = (progress, status)

    def take(self) -> tuple[float, str | None] | None:
        with self._lock:
            pending, self._pending = self._pending, None
        return pending


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
