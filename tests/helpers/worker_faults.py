"""Faults made inside a real Worker, for the integration tests of what it does about them."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from skiplock import Worker


def failing_calls(worker: Worker, name: str) -> tuple[asyncio.Event, list[tuple[Any, ...]]]:
    """Make the worker's store call ``name`` fail as if the server were out of reach, until the
    returned event is set (the rest of the worker still reaches it); the list gets the
    arguments of each call that failed."""
    call = getattr(worker.store, name)
    reachable = asyncio.Event()
    failed: list[tuple[Any, ...]] = []

    async def failing(*args: Any) -> Any:
        if not reachable.is_set():
            failed.append(args)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return await call(*args)

    setattr(worker.store, name, failing)
    return reachable, failed


def failing_heartbeats(worker: Worker) -> asyncio.Event:
    """Make the worker's heartbeats fail until the returned event is set."""
    return failing_calls(worker, "job_extend_leases")[0]
