"""Attack test (outside review, wip/attack2): a server at max_connections ("too many clients")
while a pool's connections are lost.  Each chain of reconnect tries gives up after
RECONNECT_WINDOW and calls pool.check() to begin another (open_pool's try_again); but
psycopg_pool's check() grows the pool by one connection whenever it is below max_size and not
growing already, however many connections it has.  So each such episode left an idle pool one
connection larger than its min_size, up to max_size (a worker's pool: 2, then 3, 4, 5, 6), each
taking a server slot as soon as one was free: the pools of every worker filled the slots
freed after the shortage, the other clients' included, which kept the server at its limit."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.scratch_pg import ScratchCluster, find_pg_bindir
from skiplock import App
from skiplock._db.client_async import open_pool as open_async_pool
from skiplock._db.client_sync import open_pool as open_sync_pool
from skiplock._db.store_async import AsyncStore
from skiplock._db.store_sync import SyncStore

pytestmark = pytest.mark.skipif(find_pg_bindir() is None, reason="needs initdb and pg_ctl")

MIN, MAX = 2, 6  # a worker's pool (WORKER_POOL_MIN, WORKER_POOL_MAX)
SHORTAGE = 7.0  # long enough for two chains of tries to give up (RECONNECT_WINDOW is 3 s)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ScratchCluster]:
    c = ScratchCluster()
    c.settings.update(max_connections="14", superuser_reserved_connections="1")
    try:
        c.start()
        yield c
    finally:
        c.destroy()


def _sessions(admin: psycopg.Connection[Any]) -> int:
    (n,) = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skiplock'"
    ).fetchone()  # type: ignore[misc]
    return int(n)


def _fill(dsn: str) -> list[psycopg.Connection[Any]]:
    hogs = []
    while True:
        try:
            hogs.append(psycopg.connect(dsn, autocommit=True, application_name="hog"))
        except psycopg.OperationalError:
            return hogs


def _shortage(cluster: ScratchCluster, admin: psycopg.Connection[Any], check: Any) -> None:
    """The server full, the pool's sessions ended, until two chains gave up; then the slots
    free again, and the pool back at its min_size."""
    hogs = _fill(cluster.dsn)
    try:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'skiplock'"
        )
        time.sleep(0.3)
        check()  # the pool finds its connections broken (as a worker's next use would)
        time.sleep(SHORTAGE)
    finally:
        for hog in hogs:
            hog.close()
    deadline = time.monotonic() + 15
    while _sessions(admin) < MIN and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # a growing chain's next try


@pytest.fixture
def admin(cluster: ScratchCluster) -> Iterator[psycopg.Connection[Any]]:
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        yield conn


def test_a_sync_pool_keeps_its_size_through_a_connection_shortage(
    cluster: ScratchCluster, admin: psycopg.Connection[Any]
) -> None:
    app = App(cluster.dsn, "growth")
    pool = open_sync_pool(cluster.dsn, SyncStore(app.queries), min_size=MIN, max_size=MAX)
    try:
        for episode in (1, 2):
            _shortage(cluster, admin, pool.check)
            assert _sessions(admin) <= MIN, f"after shortage {episode}: {pool.get_stats()}"
    finally:
        pool.close()
        app.close()


def test_an_async_pool_keeps_its_size_through_a_connection_shortage(
    cluster: ScratchCluster, admin: psycopg.Connection[Any]
) -> None:
    app = App(cluster.dsn, "growth")

    async def scenario() -> None:
        pool = await open_async_pool(
            cluster.dsn, AsyncStore(app.queries), min_size=MIN, max_size=MAX
        )
        loop = asyncio.get_running_loop()
        try:
            for episode in (1, 2):

                def check() -> None:
                    asyncio.run_coroutine_threadsafe(pool.check(), loop).result(10)

                await asyncio.to_thread(_shortage, cluster, admin, check)
                sessions = await asyncio.to_thread(_sessions, admin)
                assert sessions <= MIN, f"after shortage {episode}: {pool.get_stats()}"
        finally:
            await pool.close()

    try:
        asyncio.run(scenario())
    finally:
        app.close()
