"""A maintenance leader stops counting itself leader when its term runs out unrenewed, even
while its renewal is still waiting for an answer: a host cut off from the server (issue 47,
tests/network/scenarios.py ``cut_host``) kept acting as leader for the whole cut, 20 s into
the next leader's term.  Here the renewal waits on the role's row, locked by another session
(it gives up after its 2 s lock timeout), instead of on a silent network."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from helpers.stores import AsyncStore
from skiplock import App
from skiplock._runtime.leader import LeaderElector

TTL = 1.0


def test_a_leader_whose_renewal_hangs_is_no_longer_leader_once_its_term_ends(
    app: App, async_store: AsyncStore, pg_dsn: str, schema: str
) -> None:
    async def scenario() -> list[tuple[float, bool]]:
        pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=2, open=False)
        await pool.open()
        elector = LeaderElector(async_store, pool, "the-leader", ttl=TTL)
        try:
            began = time.monotonic()
            assert await elector.try_acquire()
            runner = asyncio.create_task(elector.run())
            await asyncio.sleep(0.05)  # its first renewal went through
            blocker: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(pg_dsn)
            await blocker.execute(
                sql.SQL("SELECT 1 FROM {} FOR UPDATE").format(sql.Identifier(schema, "leaders"))
            )
            seen = []
            while time.monotonic() - began < TTL + 1.0:  # before the renewal's lock timeout
                seen.append((time.monotonic() - began, elector.is_leader))
                await asyncio.sleep(0.05)
            await blocker.rollback()
            await blocker.close()
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            return seen
        finally:
            await pool.close()

    seen = asyncio.run(scenario())
    # Its term began before its last successful renewal was sent: at most TTL after `began`
    # plus the first renewal's 0.05 s, so from TTL + 0.1 s on it must not count itself leader.
    late = [(round(t, 2), leader) for t, leader in seen if t > TTL + 0.1 and leader]
    assert not late, late
    assert any(leader for t, leader in seen if t < TTL / 3), seen
