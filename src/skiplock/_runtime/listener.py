"""LISTEN for wake-ups on one dedicated connection per worker process (never a pooled one).

Notifications are hints: the claim loop also polls, so a missed one costs at most a poll
interval.  The listener reconnects with jittered backoff when its connection drops, and wakes
the claim loop after reconnecting, since notifications sent meanwhile are lost.  Right after
connecting it notifies itself once: when that probe never arrives (a transaction-mode pooler
such as PgBouncer sits in between), it says so loudly and the worker relies on polling.

Producers notify a queue only while one of its workers is idle (docs/design.md,
"Notifications only to idle workers"): the claim loop says when its worker waits for news
(:meth:`Listener.want_idle`), and the listener marks it so in its session, which the server
forgets with the session.  Once marked, it wakes the claim loop for one more claim: a job
committed before the mark sent no notification.

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
# How long marking the worker idle waits behind a session holding a queue's key exclusively:
# a producer holds it for a moment; a stranger may hold it for ever (then producers notify).
IDLE_LOCK_TIMEOUT = 0.05


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
        self.idle_wanted: bool = False  # the claim loop waits for news (see want_idle)
        self.idle_held: bool = False  # this session marks the worker idle
        self.idle_failed: bool = False  # the last mark waited too long (a stranger's lock)
        self._idle_changed: asyncio.Event = asyncio.Event()
        self._mid_batch: bool = False  # the reader handles a notification (see _read)

    def want_idle(self, idle: bool) -> None:
        """The worker waits for news of new work (``True``) or goes back to its queues on its
        own (``False``): mark it so for producers, soon, without blocking the caller."""
        if idle != self.idle_wanted or (idle and not self.idle_held):
            self.idle_wanted = idle
            self._idle_changed.set()

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
                    self.idle_held = False  # a new session marks nothing yet
                    self.backend_pid = conn.info.backend_pid
                    self.listening.set()
                    backoff = 0.2
                    self.on_wake()  # whatever was notified while we were away
                    await self._consume(conn)
            except (psycopg.Error, SkiplockError, OSError) as exc:
                self.listening.clear()
                self.idle_held = False
                self.reconnects += 1
                delay = backoff * random.uniform(0.5, 1.5)
                log.warning("listener connection lost (%s); reconnecting in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                backoff = min(backoff * 2, self.max_backoff)

    async def _consume(self, conn: AsyncConnection[Any]) -> None:
        probe = f"probe:{secrets.token_hex(8)}"
        probe_task = asyncio.create_task(self._send_probe(probe)) if self.works is None else None
        try:
            while True:
                # Read notifications until the claim loop changes its mind about being idle;
                # then stop reading (the driver keeps what arrives meanwhile), mark, read again.
                reading = asyncio.create_task(self._read(conn, probe))
                changed = asyncio.create_task(self._idle_changed.wait())
                try:
                    await asyncio.wait({reading, changed}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
                    reading.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reading
                if reading.done() and not reading.cancelled():
                    reading.result()  # the connection failed
                if self._mid_batch:
                    # The rest of a batch was lost: new work perhaps (a cancel request of a
                    # held-lock job is read from its table within a poll interval anyway).
                    self.on_wake()
                self._idle_changed.clear()
                await self._mark_idle(conn)
        finally:
            if probe_task is not None:
                probe_task.cancel()

    async def _read(self, conn: AsyncConnection[Any], probe: str) -> None:
        # A batch of notifications that arrived together is handed out one by one: stopped
        # between two of them (mid_batch), the reader loses the rest of the batch.
        notifies = conn.notifies()
        try:
            while True:
                self._mid_batch = False
                notify = await anext(notifies)
                self._mid_batch = True
                self._handle(notify, probe)
                if notify.payload in self.queues:
                    # Let the woken claim loop send its claim before this task goes back to
                    # waiting for notifications (which takes it a while, in the driver).
                    await asyncio.sleep(0)
        finally:
            await notifies.aclose()

    def _handle(self, notify: psycopg.Notify, probe: str) -> None:
        if notify.payload == probe:
            self.works = True
        elif notify.payload in self.queues:
            self.on_wake()
        elif notify.payload.startswith(CANCEL_PREFIX):
            with contextlib.suppress(ValueError):
                self.on_cancel(int(notify.payload.removeprefix(CANCEL_PREFIX)))

    async def _mark_idle(self, conn: AsyncConnection[Any]) -> None:
        """Make the session's mark follow :attr:`idle_wanted`."""
        if self.idle_wanted and not self.idle_held and self.works is not False:
            # (Not when notifications never arrive: a transaction-mode pooler in between would
            # leave the mark on a server session other clients get.)
            try:
                await self.store.channel_idle_hold(conn, sorted(self.queues), IDLE_LOCK_TIMEOUT)
            except psycopg.errors.LockNotAvailable:
                # A session holds a queue's key for longer than a producer does: while it
                # does, producers cannot take it either and notify; the claim loop tries again
                # soon (see idle_failed), in case it lets go.  Keys taken before the timeout
                # are dropped (a session's advisory locks outlive its transaction).
                self.idle_failed = True
                await self.store.channel_idle_release(conn, sorted(self.queues), held=False)
                return
            self.idle_held, self.idle_failed = True, False
            # Jobs committed before the mark sent no notification: claim once more.
            self.on_wake()
        elif not self.idle_wanted and self.idle_held:
            await self.store.channel_idle_release(conn, sorted(self.queues))
            self.idle_held = False

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
