"""Migration 0029 on a schema that already holds what it now refuses: a keyed pending row with a
far run_at (an enqueuer's, written before the fair_key trigger clamped it) and aging steps past
the new bound.  Neither may keep blocking its key or the leader once the schema is upgraded."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from skiplock import App
from skiplock._db.bounds import AGING_STEP_MAX
from skiplock._db.migrations import all_migrations

VERSION = next(m.version for m in all_migrations() if m.name == "strangers_and_bounds")


@pytest.fixture
def before(pg_dsn: str, db: Any) -> Iterator[App]:
    """An app on a schema of its own migrated up to the migration before 0029."""
    app = App(pg_dsn, f"t_{secrets.token_hex(5)}")
    app.sync_client.migrate(up_to=VERSION - 1)
    try:
        yield app
    finally:
        app.close()
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(app.schema)))


def test_a_keyed_pending_row_written_far_ahead_is_due_after_the_upgrade(
    before: App, db: psycopg.Connection[Any]
) -> None:
    jobs = sql.Identifier(before.schema, "jobs")
    (far,) = db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, status, run_at, fair_key)"
            " VALUES ('fq', 'work', '{{}}', 'pending', '9999-01-01', 'tenant') RETURNING id"
        ).format(jobs)
    ).fetchone()  # type: ignore[misc]
    before.sync_client.migrate()
    (run_at,) = db.execute(
        sql.SQL("SELECT run_at FROM {} WHERE id = %s").format(jobs), [far]
    ).fetchone()  # type: ignore[misc]
    assert run_at < dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    # The key's next job takes its turn after it, not in year 9999.
    (after,) = db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, fair_key)"
            " VALUES ('fq', 'work', '{{}}', 'tenant') RETURNING run_at"
        ).format(jobs)
    ).fetchone()  # type: ignore[misc]
    assert after < dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)


def test_an_aging_step_past_the_bound_becomes_the_bound(
    before: App, db: psycopg.Connection[Any]
) -> None:
    queues = sql.Identifier(before.schema, "queues")
    db.execute(
        sql.SQL(
            "INSERT INTO {} (name, aging_step) VALUES"
            " ('a', 'NaN'), ('b', 'Infinity'), ('c', 1e300), ('d', 30)"
        ).format(queues)
    )
    before.sync_client.migrate()
    steps = dict(db.execute(sql.SQL("SELECT name, aging_step FROM {}").format(queues)))
    assert steps == {"a": AGING_STEP_MAX, "b": AGING_STEP_MAX, "c": AGING_STEP_MAX, "d": 30.0}
