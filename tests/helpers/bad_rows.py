"""Job rows written by SQL past the client's checks, as anyone with INSERT on the table may."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def drop_bound_checks(db: psycopg.Connection[Any], schema: str) -> None:
    """Drop the table's ``jobs_bound_*`` CHECK constraints, which refuse such rows: the worker
    must survive rows written before they existed (they are added NOT VALID)."""
    table = sql.Identifier(schema, "jobs")
    names = db.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c' "
        "AND conname LIKE 'jobs\\_bound\\_%%'",
        [table.as_string(db)],
    ).fetchall()
    for (name,) in names:
        db.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(table, sql.Identifier(name)))


def insert_row(
    db: psycopg.Connection[Any],
    schema: str,
    task: str,
    payload: str,
    *,
    queue: str = "q",
    max_attempts: int = 3,
    **columns: str,
) -> int:
    """A pending job row (other columns given as SQL text, cast by the server), after
    dropping the checks that would refuse it."""
    drop_bound_checks(db, schema)
    names = ["queue", "task", "payload", "max_attempts", *columns]
    values = [queue, task, payload, max_attempts, *columns.values()]
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
        sql.Identifier(schema, "jobs"),
        sql.SQL(", ").join(map(sql.Identifier, names)),
        sql.SQL(", ").join(sql.Placeholder() * len(names)),
    )
    row = db.execute(query, values).fetchone()
    assert row is not None
    return int(row[0])


# Deeper than any Python's JSON decoder takes (3.11's stops near 1,000 levels, 3.13's near
# 10,000), yet within what PostgreSQL's jsonb parser takes with its default max_stack_depth.
UNDECODABLE_DEPTH = 12_000


def nested(depth: int) -> str:
    """A JSON object whose one value is lists nested ``depth`` deep."""
    return '{"n": ' + "[" * depth + "]" * depth + "}"


def job_state(db: psycopg.Connection[Any], schema: str, job_id: int) -> tuple[str, int, str]:
    """(status, attempts, last_error) read by SQL: the admin surfaces may not read such rows."""
    row = db.execute(
        sql.SQL("SELECT status, attempts, last_error FROM {} WHERE id = %s").format(
            sql.Identifier(schema, "jobs")
        ),
        [job_id],
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2] or ""


def nested_payload(depth: int) -> dict[str, Any]:
    """A payload whose nesting depth (objects and arrays, the payload itself counting) is
    ``depth``."""
    value: Any = 1
    for _ in range(depth - 1):
        value = [value]
    return {"v": value}


def insert_sql(db: psycopg.Connection[Any], schema: str, **columns: Any) -> int:
    """Insert one job by SQL, as a non-Python producer would; its id."""
    values = {"queue": "q", "task": "t", "payload": "{}", **columns}
    names = list(values)
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
        sql.Identifier(schema, "jobs"),
        sql.SQL(", ").join(map(sql.Identifier, names)),
        sql.SQL(", ").join(sql.Placeholder() * len(names)),
    )
    row = db.execute(query, [values[n] for n in names]).fetchone()
    assert row is not None
    return int(row[0])
