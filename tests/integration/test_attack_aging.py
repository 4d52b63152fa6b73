"""Attack tests (outside review, wip/attack): hostile input to priority aging must affect
only the row or queue that carries it, never the aging of every other queue."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.stores import SyncStore
from skiplock import App
from skiplock._db.bounds import AGING_STEP_MAX

from .test_aging import backdate, priority_and_meta


@pytest.mark.parametrize("aged_from", ["x", 2**40, 1.5, None, [1]])
def test_a_producer_meta_skiplock_aged_from_does_not_stop_aging(
    app: App, store: SyncStore, db: Any, aged_from: Any
) -> None:
    # The producer owns meta: a value of the reserved key that is not a priority must not make
    # the leader's aging statement fail for its queue and for every queue after it.
    @app.task(name="a", queue="a")
    def a() -> None: ...

    @app.task(name="b", queue="b")
    def b() -> None: ...

    a.with_options(priority=1).enqueue()
    (bad,) = a.with_options(priority=9, meta={"skiplock_aged_from": aged_from}).enqueue_many([{}])
    (good_a,) = a.with_options(priority=9).enqueue_many([{}])
    b.with_options(priority=1).enqueue()
    (good_b,) = b.with_options(priority=9).enqueue_many([{}])
    for job in (bad, good_a, good_b):
        backdate(db, app, job.id, 35)
    app.sync_client.set_aging("a", 10)
    app.sync_client.set_aging("b", 10)
    store.job_age_pending(db, 100)
    assert priority_and_meta(db, app, good_b.id)[0] == 6, "queue b was not aged"
    assert priority_and_meta(db, app, good_a.id)[0] == 6, "queue a's other job was not aged"


def test_a_tiny_aging_step_does_not_overflow(app: App, store: SyncStore, db: Any) -> None:
    # set_aging accepts any finite positive step; the levels earned by a long wait at a tiny
    # step exceed an int and must saturate at the best pending priority, not fail the round.
    @app.task(name="a", queue="a")
    def a() -> None: ...

    a.with_options(priority=1).enqueue()
    (low,) = a.with_options(priority=9).enqueue_many([{}])
    backdate(db, app, low.id, 3600)
    app.sync_client.set_aging("a", 1e-6)
    store.job_age_pending(db, 100)
    assert priority_and_meta(db, app, low.id)[0] == 1


@pytest.mark.parametrize(
    "step",
    [1e300, 10**400, 1e10, float("nan"), float("inf"), True],
    ids=["1e300", "10**400", "1e10", "nan", "inf", "True"],
)
def test_set_aging_refuses_a_step_beyond_its_bound_and_writes_nothing(
    app: App, db: Any, step: Any
) -> None:
    # 1e300 was accepted and failed the leader's aging statement (make_interval out of range)
    # for every queue; 10**400 raised OverflowError, not a ValueError.
    with pytest.raises(ValueError, match="aging step"):
        app.sync_client.set_aging("a", step)
    query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(app.schema, "queues"))
    assert db.execute(query).fetchone() == (0,)


@pytest.mark.parametrize("step", ["1e300", "NaN", "Infinity", str(2 * AGING_STEP_MAX)])
def test_the_queues_table_refuses_the_steps_set_aging_refuses(app: App, db: Any, step: str) -> None:
    # A non-Python admin writes the table directly: what it accepts, the leader must run.
    with pytest.raises(psycopg.errors.CheckViolation, match="queues_bound_aging_step"):
        db.execute(
            sql.SQL("INSERT INTO {} (name, aging_step) VALUES ('a', %s::float8)").format(
                sql.Identifier(app.schema, "queues")
            ),
            [step],
        )


def test_the_largest_aging_step_runs(app: App, store: SyncStore, db: Any) -> None:
    @app.task(name="a", queue="a")
    def a() -> None: ...

    @app.task(name="b", queue="b")
    def b() -> None: ...

    b.with_options(priority=1).enqueue()
    (low,) = b.with_options(priority=9).enqueue_many([{}])
    backdate(db, app, low.id, 35)
    app.sync_client.set_aging("a", AGING_STEP_MAX)
    app.sync_client.set_aging("b", 10)
    assert store.job_age_pending(db, 100) == {"b": 1}
