"""Queue settings every worker follows: paused queues, and queues with a cluster-wide
concurrency or rate limit (claimed through the serialised, limited claim), re-read every poll
interval, so a pause or a limit takes effect within one interval."""

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
        # Queues claimed through the limited claim: their concurrency limit, None for a queue
        # with only a rate limit.
        self.limits: dict[str, int | None] = {}

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
        paused = {name for name, (is_paused, _, _) in settings.items() if is_paused}
        if paused != self.paused:
            log.info("paused queues: %s", ", ".join(sorted(paused)) or "none")
            if self.paused - paused:
                self.on_resume()
        self.paused = paused
        self.limits = {
            name: limit
            for name, (_, limit, rated) in settings.items()
            if limit is not None or rated
        }
