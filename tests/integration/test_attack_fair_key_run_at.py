"""Attack test (outside review, wip/attack): one row an enqueuer login inserts
by hand, pending with a fair_key and a run_at far ahead (the role's policy allows it; enqueue
itself would make it scheduled), becomes the head of its queue's turns, and the fair_key_turn
trigger (migration 0027) gives every other producer's keyed job of that queue and priority
that run_at: behind every unkeyed job, and never aged.  Fixed by migration 0029: the trigger
gives a keyed pending row a run_at no later than now() (a pending row is due), and takes the
head of the turns no later than now()."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.role_logins import Roles, role_logins

from .test_roles_fair_key import producer


@pytest.fixture
def roles(pg_dsn: str, schema: str, db: psycopg.Connection[Any]) -> Iterator[Roles]:
    with role_logins(db, pg_dsn, schema) as made:
        yield made


def test_an_enqueuers_future_pending_row_does_not_set_other_keys_turns(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(roles.dsn["enqueuer"], autocommit=True) as hostile:
        hostile.execute(
            sql.SQL(
                "INSERT INTO {} (queue, task, payload, status, run_at, fair_key)"
                " VALUES ('fq', 'work', '{{}}', 'pending', '9999-01-01', 'evil')"
            ).format(sql.Identifier(schema, "jobs"))
        )
    app = producer(pg_dsn, schema)
    try:
        job = app.enqueue("work", {"n": 1}, fair_key="tenant")
    finally:
        app.close()
    (run_at,) = db.execute(
        sql.SQL("SELECT run_at FROM {} WHERE id = %s").format(sql.Identifier(schema, "jobs")),
        [job.id],
    ).fetchone()  # type: ignore[misc]
    assert run_at < dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
