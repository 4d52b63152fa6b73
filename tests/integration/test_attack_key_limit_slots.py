"""Attack test (outside review, wip/attack): set_key_limit accepts any concurrency up to
INT_MAX, and migration 0028 made each unit of it a row of held_key_runs: a careless "no real
limit" of 2**31 - 1 wrote rows for hours.  Held-lock jobs each hold a connection, so slots past
any server's connection count can never be used."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from skiplock import App

INT_MAX = 2**31 - 1


def test_a_huge_key_concurrency_limit_is_set_at_once(
    app: App, pg_dsn: str, db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '20s'")
        app.sync_client.set_key_limit("tenant", concurrency=INT_MAX, conn=conn)
    assert app.sync_client.key_limits()["tenant"]["concurrency"] == INT_MAX
    (slots,) = db.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE key = 'tenant'").format(
            sql.Identifier(app.schema, "held_key_runs")
        )
    ).fetchone()  # type: ignore[misc]
    assert 0 < slots < INT_MAX
