"""LISTEN for wake-ups on one dedicated connection per worker process (never a pooled one).

Notifications are hints: the claim loop also polls, so a missed one costs at most a poll
interval.  The listener reconnects with jittered backoff when its connection drops, and wakes
the claim loop after reconnecting, since notifications sent meanwhile are lost.  Right after
connecting it notifies itself once: when that probe never arrives (a transaction-mode pooler
such as PgBouncer sits in between), it says so loudly and the worker relies on polling.

The same channel carries an admin's request to cancel a job running under a held lock (see
:func:`skiplock._db.wakeups.cancel_payload`): a leased job's row takes a flag its worker's
heartbeat reads, but a held-lock job's row is locked by the transaction it runs in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection

from skiplock._db.connections import connect_kwargs, server_watch_settings
from skiplock._db.store_async import AsyncStore
from skiplock._db.wakeups import CANCEL_PREFIX
from skiplock.errors import SkiplockError

log = logging.getLogger("skiplock._runtime.listener")

PROBE_TIMEOUT = 2.0


class Listener:
    def __init__(
        self,
        dsn: str,
        store: AsyncStore,
        queues: set[str],
        on_wake: Callable[[], None],
        *,
        on_cancel: Callable[[int], None] = lambda job_id: None,
        max_backoff: float = 10.0,
        prepare: bool = True,
    ) -> None:
        self.dsn = dsn
        self.prepare = prepare
        self.store = store
        self.queues = queues
        self.on_wake = on_wake
        self.on_cancel = on_cancel
        self.max_backoff = max_backoff
        self.listening: asyncio.Event = asyncio.Event()
        self.works: bool | None = None  # None until the first probe finished
        self.reconnects: int = 0
        self.backend_pid: int | None = None

    async def run(self) -> None:
        backoff = 0.2
        while True:
            try:
                conn = await AsyncConnection.connect(
                    self.dsn,
                    **{
                        **connect_kwargs(self.dsn, prepare=self.prepare),
                        "application_name": "skiplock-listener",
                    },
                )
                async with conn:
                    if self.prepare and (watch := server_watch_settings(self.dsn)) is not None:
                        await self.store.session_watch_client(conn, watch)
                    await self.store.channel_listen(conn)
                    self.backend_pid = conn.info.backend_pid
                    self.listening.set()
                    backoff = 0.2
                    self.on_wake()  # whatever was notified while we were away
                    await self._consume(conn)
            except (psycopg.Error, SkiplockError, OSError) as exc:
                self.listening.clear()
                self.reconnects += 1
                delay = backoff * random.uniform(0.5, 1.5)
                log.warning("listener connection lost (%s); reconnecting in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                backoff = min(backoff * 2, self.max_backoff)

    async def _consume(self, conn: AsyncConnection[Any]) -> None:
        probe = f"probe:{secrets.token_hex(8)}"
        probe_task = asyncio.create_task(self._send_probe(probe)) if self.works is None else None
        try:
            async for notify in conn.notifies():
                if notify.payload == probe:
                    self.works = True
                elif notify.payload in self.queues:
                    self.on_wake()
                    # Let the woken claim loop send its claim before this task goes back to
                    # waiting for notifications (which takes it a while, in the driver).
                    await asyncio.sleep(0)
                elif notify.payload.startswith(CANCEL_PREFIX):
                    with contextlib.suppress(ValueError):
                        self.on_cancel(int(notify.payload.removeprefix(CANCEL_PREFIX)))
        finally:
            if probe_task is not None:
                probe_task.cancel()

    async def _send_probe(self, probe: str) -> None:
        try:
            kwargs = connect_kwargs(self.dsn, prepare=self.prepare)
            async with await AsyncConnection.connect(self.dsn, **kwargs) as conn:
                await self.store.channel_notify(conn, probe)
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("could not send the LISTEN probe: %s", exc)
            return
        await asyncio.sleep(PROBE_TIMEOUT)
        if self.works is None:
            self.works = False
            log.error(
                "LISTEN/NOTIFY does not reach this worker: a transaction-mode connection pooler "
                "(e.g. PgBouncer pool_mode=transaction) is probably in between. Jobs still run, "
                "but only at each poll; point the worker at PostgreSQL directly or through a "
                "session-mode pool for wake-ups, or run it with --poll-only to silence this."
                + (
                    ""
                    if not self.prepare
                    else " Unless the pooler tracks prepared statements (PgBouncer 1.21+ with "
                    "max_prepared_statements), also set SKIPLOCK_PREPARED_STATEMENTS=off."
                )
            )
