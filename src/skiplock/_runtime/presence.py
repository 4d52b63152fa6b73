"""A worker's row in the ``workers`` table: who runs, where, on which queues, and whether it
still answers.

Each worker upserts its row when it starts and every ``PRESENCE_INTERVAL`` seconds after
(with the jobs it runs now and has finished since it started), and deletes it when it stops.
A worker that was killed leaves its row behind: it stops being renewed, is shown as silent
once older than ``SILENT_AFTER``, and the maintenance leader deletes it after ``GONE_AFTER``
(both in :mod:`skiplock._db.presence`).
Nothing that claims or finishes jobs reads the table, so a failed report is only logged: the
jobs go on.  ``skiplock workers`` and the dashboard list the rows.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from skiplock._db.presence import PRESENCE_INTERVAL
from skiplock._version import __version__
from skiplock.errors import SkiplockError

if TYPE_CHECKING:
    from skiplock._db.store_async import AsyncStore

log = logging.getLogger("skiplock.worker")


class Presence:
    def __init__(
        self,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        worker_id: str,
        *,
        queues: Sequence[str],
        concurrency: int,
        model: str,
        counts: Callable[[], tuple[int, int]],  # (running now, finished since start)
        interval: float | None = None,  # None: PRESENCE_INTERVAL
    ) -> None:
        self.store = store
        self.pool = pool
        self.counts = counts
        self.interval = PRESENCE_INTERVAL if interval is None else interval
        self._row: dict[str, Any] = {
            "id": worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(queues),
            "concurrency": concurrency,
            "model": model,
            "version": __version__,
        }

    async def run(self) -> None:
        while True:
            await self.report()
            await asyncio.sleep(self.interval)

    async def report(self) -> None:
        running, finished = self.counts()
        try:
            async with self.pool.connection() as conn:
                await self.store.presence_report(
                    conn, {**self._row, "running": running, "finished": finished}
                )
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("could not report this worker in the workers table: %s", exc)

    async def forget(self) -> None:
        """Delete the row, at shutdown (a failure leaves it to turn silent, then be pruned)."""
        try:
            async with self.pool.connection() as conn:
                await self.store.presence_forget(conn, self._row["id"])
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("could not remove this worker from the workers table: %s", exc)
