"""The bench's counting proxy with a real server: what passes through it works, and the
statements it counts are the ones the client ran."""

from __future__ import annotations

import asyncio

import asyncpg
import psycopg
from bench.db import as_url
from bench.wire import CountingProxy


def test_counts_what_psycopg_and_asyncpg_run_through_it(pg_dsn: str) -> None:
    with CountingProxy(pg_dsn) as proxy:
        dsn = proxy.dsn_through(pg_dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert [conn.execute("SELECT %s::int", (i,)).fetchone() for i in range(5)] == [
                (i,) for i in range(5)
            ]
            with conn.transaction():
                conn.execute("SELECT 1")
        counts = proxy.counts()
        # 5 executes with parameters, then BEGIN, one more, COMMIT (simple or extended)
        assert counts.statements == 8
        assert counts.connections == 1

        async def with_asyncpg() -> list[int]:
            conn = await asyncpg.connect(as_url(dsn))
            try:
                return [await conn.fetchval("SELECT $1::int * 2", i) for i in range(3)]
            finally:
                await conn.close()

        assert asyncio.run(with_asyncpg()) == [0, 2, 4]
        later = proxy.counts()
    assert later.minus(counts).messages["E"] >= 3
    assert later.connections == 2
    assert later.to_client > later.to_server > 0
