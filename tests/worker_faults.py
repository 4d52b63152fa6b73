"""Faults made inside a real Worker, for the integration tests of what it does about them."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from skiplock import Worker


def failing_heartbeats(worker: Worker) -> asyncio.Event:
    """Make the worker's heartbeats fail as if the server were out of reach, until the returned
    event is set (the rest of the worker still reaches it)."""
    beat = worker.store.job_heartbeat
    reachable = asyncio.Event()

    async def heartbeat(conn: Any, claims: Any, seconds: float) -> Any:
        if not reachable.is_set():
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return await beat(conn, claims, seconds)

    worker.store.job_heartbeat = heartbeat  # type: ignore[method-assign]
    return reachable
