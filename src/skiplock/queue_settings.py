"""Queue settings every worker follows: paused queues and cluster-wide concurrency limits,
re-read every poll interval, so a pause takes effect within one interval."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg
from psycopg_pool import AsyncConnectionPool

from ._store_async import AsyncStore
from .errors import SkiplockError

log = logging.getLogger("skiplock.worker")


class QueueSettings:
    def __init__(
        self,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        queues: list[str],
        interval: float,
        on_resume: Callable[[], None],
    ) -> None:
        self.store = store
        self.pool = pool
        self.queues = queues
        self.interval = interval
        self.on_resume = on_resume
        self.paused: set[str] = set()
        self.limits: dict[str, int] = {}

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.refresh()
            except (psycopg.Error, SkiplockError) as exc:
                log.warning("could not read queue settings: %s", exc)

    async def refresh(self) -> None:
        async with self.pool.connection() as conn:
            settings = await self.store.queue_settings(conn, self.queues)
        paused = {name for name, (is_paused, _) in settings.items() if is_paused}
        if paused != self.paused:
            log.info("paused queues: %s", ", ".join(sorted(paused)) or "none")
            if self.paused - paused:
                self.on_resume()
        self.paused = paused
        self.limits = {name: limit for name, (_, limit) in settings.items() if limit is not None}
