"""Reading PostgreSQL query plans in tests: EXPLAIN a named statement with literal parameters,
or as a prepared statement's generic plan, and walk the nodes of the result."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql


def explain(
    conn: psycopg.Connection[Any], statement: sql.Composable, params: dict[str, Any], options: str
) -> dict[str, Any]:
    """EXPLAIN (``options`` FORMAT JSON) of the statement; ``conn`` should use a ClientCursor,
    so that the planner sees the parameters as literal values (a custom plan)."""
    query = sql.SQL("EXPLAIN ({} FORMAT JSON) {}").format(sql.SQL(options), statement)
    row = conn.execute(query, params).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return dict(plan[0])


def explain_generic(
    conn: psycopg.Connection[Any], statement: sql.Composable, params: dict[str, Any], options: str
) -> dict[str, Any]:
    """EXPLAIN of the generic plan that a prepared statement (psycopg prepares a statement it
    runs often) would use; with ANALYZE it runs it, so call it inside a rolled-back transaction."""
    text = statement.as_string(conn)
    order: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", placeholder, text).replace("%%", "%")
    conn.execute(f"PREPARE generic_plan AS {prepared}")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    try:
        args = sql.SQL(", ").join(sql.Literal(params[name]) for name in order)
        query = sql.SQL("EXPLAIN ({} FORMAT JSON) EXECUTE generic_plan({})").format(
            sql.SQL(options), args
        )
        row = conn.execute(query).fetchone()
        assert row is not None
        return dict(row[0][0])
    finally:
        conn.execute("DEALLOCATE generic_plan")
        conn.execute("RESET plan_cache_mode")


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A plan node and all the nodes below it."""
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)
