"""Queue settings every worker follows: paused queues, and queues with a cluster-wide
concurrency or rate limit (claimed through the serialised, limited claim), and whether any key
has limits, re-read every poll interval, so a pause or a limit takes effect within one
interval."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from skiplock._db.records import QueueLimits
from skiplock._db.store_async import AsyncStore
from skiplock._rate_limit import describe
from skiplock.errors import SkiplockError

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
        # Queues claimed through the limited claim, with their limits.
        self.limits: dict[str, QueueLimits] = {}
        # Whether any key has limits: then leased claims also claim through the claim of
        # limited keys (see PostgresClaimer).
        self.keys_limited = False

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
            keys_limited = await self.store.limits_on_any_key(conn)
        if keys_limited != self.keys_limited:
            log.info("keys with limits: %s", "some" if keys_limited else "none")
        self.keys_limited = keys_limited
        paused = {name for name, setting in settings.items() if setting.paused}
        if paused != self.paused:
            log.info("paused queues: %s", ", ".join(sorted(paused)) or "none")
            if self.paused - paused:
                self.on_resume()
        self.paused = paused
        self.limits = {name: s.limits for name, s in settings.items() if s.limited}


def describe_settings(row: dict[str, Any]) -> str:
    """A queue's settings in words, for a row of ``queue_status`` (``skiplock status``, the
    dashboard): "paused", "at most N running", "at most N starts per Ps", or nothing."""
    parts = ["paused"] if row["paused"] else []
    if row["concurrency_limit"] is not None:
        parts.append(f"at most {row['concurrency_limit']} running")
    if row["rate_limit"] is not None:
        parts.append(describe(row["rate_limit"], row["rate_period"]))
    return ", ".join(parts)
