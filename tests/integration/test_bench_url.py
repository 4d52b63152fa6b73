"""The URL the benchmark gives PGQueuer (asyncpg) and Procrastinate (psycopg's pool) reaches the
server and database of the test's DSN, the embedded server's unix socket included."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from bench.db import as_url

WHERE = "SELECT current_database() AS db, pg_postmaster_start_time()::text AS started"


def test_peers_reach_the_same_server_and_database(pg_dsn: str) -> None:
    import asyncpg
    from procrastinate import PsycopgConnector

    with psycopg.connect(pg_dsn) as conn:
        expected = conn.execute(WHERE).fetchone()
    url = as_url(pg_dsn)

    async def through_asyncpg() -> tuple[Any, ...]:
        connection = await asyncpg.connect(url)
        try:
            return tuple(await connection.fetchrow(WHERE))
        finally:
            await connection.close()

    async def through_procrastinate() -> tuple[Any, ...]:
        connector = PsycopgConnector(conninfo=url)
        await connector.open_async()
        try:
            row = await connector.execute_query_one_async(WHERE)
            return tuple(row.values())
        finally:
            await connector.close_async()

    assert asyncio.run(through_asyncpg()) == expected
    assert asyncio.run(through_procrastinate()) == expected
