"""Attack test (outside review, wip/attack2): a producer that gives a keyed job a run_at long
past (the client takes any time from year 1: a careless
``run_at=datetime.fromtimestamp(0, UTC)``, or the enqueuer role's own INSERT) made that run_at
the head of its queue's turns (fair_key_take_turn), and every other tenant's keyed job of that
queue and priority then took it as its turn: back-dated decades, before every unkeyed job
however long it waited, and, on a queue with an aging step (keyed jobs age from their turn),
aged at once to the best priority pending.  Migration 0029 counts a keyed pending row's turn
from now(), whatever run_at it was given."""

from __future__ import annotations

import datetime as dt

import psycopg
from psycopg import sql

from helpers.stores import SyncStore
from skiplock import App

from .test_roles_fair_key import producer

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


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


def test_a_back_dated_keyed_job_does_not_age_other_tenants_jobs_past_better_ones(
    app: App, store: SyncStore, db: psycopg.Connection[object]
) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    app.sync_client.set_aging("q", 60)
    (urgent,) = t.with_options(priority=0).enqueue_many([{"n": 0}])
    t.with_options(priority=9, fair_key="careless", run_at=EPOCH).enqueue_many([{"n": 1}])
    (tenant,) = t.with_options(priority=9, fair_key="tenant").enqueue_many([{"n": 2}])
    store.job_age_pending(db, 100)
    # The careless producer's own job may go first (it dated it); the other tenant's job, due
    # for less than a step, may not pass the urgent one.
    first_two = [j.id for j in store.job_claim(db, ["q"], 2, "w", 30.0)]
    assert tenant.id not in first_two and urgent.id in first_two
