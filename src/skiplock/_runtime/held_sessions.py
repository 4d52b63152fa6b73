"""Held-lock jobs whose session ended are stopped.

A held-lock job's claim lives in its session's open transaction.  When that session ends while
the task runs (the server ended it: ``idle_in_transaction_session_timeout``,
``pg_terminate_backend``, a restart; or the network dropped it and a keepalive noticed), the
transaction has rolled back: the job is claimable again at once, and another worker may
already run it.  Unless the task used its connection, nothing told it: it ran to its end, and
only its outcome's commit failed.  So, every second, the worker looks at the connection of
each held-lock job, without a round trip and only while no statement runs on it, and stops a
job whose session is gone as it stops a leased job whose lease was reclaimed
(:meth:`~skiplock._runtime.running.RunningJob.session_ended`).
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import ConnStatus, TransactionStatus

from skiplock._runtime.running import RunningJob

WATCH_INTERVAL = 1.0  # seconds between two looks: no I/O, so cheap
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


def session_ended(conn: AsyncConnection[Any]) -> bool:
    """Whether ``conn``'s session is known to have ended, found without a round trip.

    Only a connection idle in a transaction is looked at: a statement in progress (the task's
    own, through ``ctx.conn``) fails by itself if the session is gone.  The server sends such a
    session nothing but the message that ends it (a FATAL error) and then closes it, so input
    there is read: the close makes the connection bad."""
    if conn.closed:
        return True
    if conn.lock.locked():
        return False
    pgconn = conn.pgconn
    if pgconn.transaction_status not in _IN_TRANSACTION:
        return False
    poller = select.poll()
    poller.register(pgconn.socket, select.POLLIN)
    for _ in range(3):  # the message, then the close
        if not poller.poll(0):
            break
        try:
            pgconn.consume_input()
        except psycopg.OperationalError:
            return True
    return pgconn.status == ConnStatus.BAD


async def watch_held_sessions(
    running: Callable[[], Iterable[RunningJob]], interval: float = WATCH_INTERVAL
) -> None:
    """Stop the held-lock jobs whose session ended, looking every ``interval`` seconds."""
    while True:
        await asyncio.sleep(interval)
        for job in running():
            if job.conn is not None and not job.claim_gone and session_ended(job.conn):
                job.session_ended()
