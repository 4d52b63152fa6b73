"""After an outage, skiplock's connection pools connect again soon after the server is back,
however long the outage was.

psycopg_pool retries a failed connection with a delay that doubles each time (1, 2, 4, 8 s,
...): left alone, a pool whose server was down for a few seconds (or twice in a row) waits up to
twice the outage before it tries again, while the server is long back. A worker whose pool is
dark cannot write the outcomes of the jobs it ran, so their leases run out and they run again
elsewhere: the chaos suite's restart scenario lost hundreds of outcomes that way on a loaded
machine. The pools give up a chain of retries after a short window and begin a new one at once
(``RECONNECT_WINDOW`` in ``src/skiplock/_db/connections.py``), so the wait stays short.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from helpers.scratch_pg import ScratchCluster, find_pg_bindir, scratch_cluster
from skiplock import App
from skiplock._db.client_async import open_pool as open_async_pool
from skiplock._db.client_sync import open_pool as open_sync_pool
from skiplock._db.store_async import AsyncStore
from skiplock._db.store_sync import SyncStore

pytestmark = pytest.mark.skipif(find_pg_bindir() is None, reason="needs initdb and pg_ctl")

# Down long enough that an unbounded backoff's next try is 8 s after the last (tries at about
# 1, 3 and 7 s after the first failure), yet short for a test.
OUTAGE = 7.5
# What the bounded retries take at most after the server is up, with room for a slow machine;
# well under the 4-8 s an unbounded backoff waits here.
PROMPT = 4.0
# A worker's pool at its busiest: every connection it may open was open when the server went
# away, so each is retried on its own and none is left to open afresh on demand.
SIZE = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[ScratchCluster]:  # each test leaves it up
    with scratch_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def waits(cluster: ScratchCluster) -> dict[str, float]:
    """A sync and an async pool through the same outage: by pool, how long after the server was
    up it took to hand out a working connection."""
    app = App(cluster.dsn, "reconnect")
    sync_pool = open_sync_pool(cluster.dsn, SyncStore(app.queries), min_size=SIZE, max_size=SIZE)

    def sync_wait(up: float) -> float:
        with sync_pool.connection(timeout=30) as conn:
            conn.execute("SELECT 1")
        return time.monotonic() - up

    async def scenario() -> dict[str, float]:
        async_pool = await open_async_pool(
            cluster.dsn, AsyncStore(app.queries), min_size=SIZE, max_size=SIZE
        )

        async def async_wait(up: float) -> float:
            async with async_pool.connection(timeout=30) as conn:
                await conn.execute("SELECT 1")
            return time.monotonic() - up

        try:
            await asyncio.to_thread(cluster.stop, "fast")
            began = time.monotonic()
            # each pool finds every connection broken: each is retried with backoff
            await asyncio.to_thread(sync_pool.check)
            await async_pool.check()
            await asyncio.sleep(max(0.0, OUTAGE - (time.monotonic() - began)))
            await asyncio.to_thread(cluster.start)
            up = time.monotonic()
            waited = await asyncio.gather(asyncio.to_thread(sync_wait, up), async_wait(up))
            return dict(zip(("sync", "async"), waited, strict=True))
        finally:
            await async_pool.close()

    try:
        return asyncio.run(scenario())
    finally:
        sync_pool.close()
        app.close()


def test_a_sync_pool_connects_again_soon_after_a_long_outage(waits: dict[str, float]) -> None:
    waited = waits["sync"]
    assert waited < PROMPT, f"the pool connected again {waited:.1f} s after the server was up"


def test_an_async_pool_connects_again_soon_after_a_long_outage(waits: dict[str, float]) -> None:
    waited = waits["async"]
    assert waited < PROMPT, f"the pool connected again {waited:.1f} s after the server was up"
