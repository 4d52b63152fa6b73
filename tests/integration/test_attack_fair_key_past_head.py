"""Attack test (outside review, wip/attack2): migration 0029 keeps a keyed pending row's turn
from going later than now(), but not earlier than the real turns.  A producer that gives a keyed
job a run_at long past (the client takes any time from year 1: a careless
``run_at=datetime.fromtimestamp(0, UTC)``, or the enqueuer role's own INSERT) makes that run_at
the head of its queue's turns (fair_key_take_turn), and every other tenant's keyed job of that
queue and priority then takes it as its turn: back-dated decades, before every unkeyed job
however long it waited, and, on a queue with an aging step (keyed jobs age from their turn),
aged at once to the best priority pending.  The turns stay there while any keyed job is
pending, after the producer's own row has run."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from psycopg import sql

from .test_roles_fair_key import producer

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@pytest.mark.xfail(
    strict=True,
    reason="attack finding: needs a migration (fair_key_take_turn: a keyed pending row's own"
    " run_at, when it is the first of its queue and priority, should be now(), not earlier)",
)
def test_a_back_dated_keyed_job_does_not_back_date_other_tenants_turns(
    pg_dsn: str, schema: str, db: psycopg.Connection[object]
) -> None:
    app = producer(pg_dsn, schema)
    try:
        started = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        app.enqueue("work", {"n": 0}, fair_key="careless", run_at=EPOCH)
        other = app.enqueue("work", {"n": 1}, fair_key="tenant")
    finally:
        app.close()
    (run_at,) = db.execute(
        sql.SQL("SELECT run_at FROM {} WHERE id = %s").format(sql.Identifier(schema, "jobs")),
        [other.id],
    ).fetchone()  # type: ignore[misc]
    assert run_at >= started - dt.timedelta(minutes=1), (
        f"another tenant's keyed job was given the turn {run_at}"
    )
