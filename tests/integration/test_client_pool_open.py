"""The client opens one pool however many first uses race for it.  Two concurrent first uses
used to open one each: the extra pools (a connection each, and a probe connection before)
were dropped unclosed.  Async uses race on the event loop, sync ones from threads; the real
pool opener is wrapped only to count its calls."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import skiplock._db.client_async as client_async
import skiplock._db.client_sync as client_sync
from skiplock import App


def test_concurrent_first_async_uses_open_one_pool(
    pg_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[object] = []
    real = client_async.open_pool

    async def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(pool := await real(*args, **kwargs))
        return pool

    monkeypatch.setattr(client_async, "open_pool", counting)
    app = App(pg_dsn, schema)

    async def use() -> None:
        async with app.async_client.connection() as conn:
            await conn.execute("SELECT pg_sleep(0.05)")

    async def race() -> None:
        try:
            await asyncio.gather(*(use() for _ in range(4)))
        finally:
            await app.close_async()
            for pool in opened:  # what a failure here leaves open, closed for the next tests
                await pool.close()  # type: ignore[attr-defined]

    asyncio.run(race())
    assert len(opened) == 1, f"{len(opened)} pools opened by 4 concurrent first uses"


def test_concurrent_first_sync_uses_open_one_pool(
    pg_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[object] = []
    real = client_sync.open_pool

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(pool := real(*args, **kwargs))
        return pool

    monkeypatch.setattr(client_sync, "open_pool", counting)
    app = App(pg_dsn, schema)
    start = threading.Barrier(4)

    def use() -> None:
        start.wait()
        with app.sync_client.connection() as conn:
            conn.execute("SELECT pg_sleep(0.05)")

    threads = [threading.Thread(target=use) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        app.close()
        for pool in opened:
            pool.close()  # type: ignore[attr-defined]
    assert len(opened) == 1, f"{len(opened)} pools opened by 4 concurrent first uses"


def test_an_app_closed_in_one_event_loop_opens_again_in_another(pg_dsn: str, schema: str) -> None:
    """Racing first uses in one ``asyncio.run``, then again in the next, with the app closed
    between: the second loop gets a pool (a lock waited on in the first loop is not reused)."""
    app = App(pg_dsn, schema)

    async def race() -> None:
        async def use() -> None:
            async with app.async_client.connection() as conn:
                await conn.execute("SELECT pg_sleep(0.02)")

        try:
            await asyncio.gather(*(use() for _ in range(3)))
        finally:
            await app.close_async()

    asyncio.run(race())
    asyncio.run(race())
