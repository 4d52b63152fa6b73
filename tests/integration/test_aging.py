"""Aging (issue 46, item 3): with a queue's aging step set, its pending jobs gain a priority
level per step they have been due, up to the best priority pending in the queue, so a worse
priority cannot be starved for ever by a stream of better ones; without it, priority is strict
and it is."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from psycopg import sql

from helpers.stores import SyncStore
from skiplock import App, Worker

pytestmark = pytest.mark.smoke


def backdate(db: Any, app: App, job_id: int, seconds: float) -> None:
    db.execute(
        sql.SQL("UPDATE {} SET run_at = now() - make_interval(secs => %s) WHERE id = %s").format(
            sql.Identifier(app.schema, "jobs")
        ),
        [seconds, job_id],
    )


def priority_and_meta(db: Any, app: App, job_id: int) -> tuple[int, Any]:
    query = sql.SQL("SELECT priority, meta FROM {} WHERE id = %s").format(
        sql.Identifier(app.schema, "jobs")
    )
    return db.execute(query, [job_id]).fetchone()  # type: ignore[no-any-return]


def test_a_waiting_job_gains_a_level_per_step_up_to_the_best_pending(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    (best,) = t.with_options(priority=2).enqueue_many([{"n": 0}])
    (low,) = t.with_options(priority=9).enqueue_many([{"n": 1}])
    (older,) = t.with_options(priority=9, meta={"tenant": "a"}).enqueue_many([{"n": 2}])
    backdate(db, app, low.id, 31)  # three steps of 10 s
    backdate(db, app, older.id, 3600)  # hundreds of steps: as far as the best pending, 2
    conn = db
    assert store.job_age_pending(conn, 100) == {}, "aging is off by default"
    assert priority_and_meta(db, app, low.id)[0] == 9
    app.sync_client.set_aging("q", 10)
    assert store.job_age_pending(conn, 100) == {"q": 2}
    assert priority_and_meta(db, app, low.id) == (6, {"skiplock_aged_from": 9})
    assert priority_and_meta(db, app, older.id) == (
        2,
        {"tenant": "a", "skiplock_aged_from": 9},
    )
    assert priority_and_meta(db, app, best.id)[0] == 2
    # Nothing more is due yet: the next round changes nothing.
    assert store.job_age_pending(conn, 100) == {}
    backdate(db, app, low.id, 45)  # a fourth step: counted from its first priority, 9
    assert store.job_age_pending(conn, 100) == {"q": 1}
    assert priority_and_meta(db, app, low.id) == (5, {"skiplock_aged_from": 9})
    app.sync_client.set_aging("q", None)
    backdate(db, app, low.id, 3600)
    assert store.job_age_pending(conn, 100) == {}
    with pytest.raises(ValueError):
        app.sync_client.set_aging("q", 0)


def test_a_queue_of_one_priority_is_never_rewritten(app: App, store: SyncStore, db: Any) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    jobs = t.enqueue_many([{"n": n} for n in range(5)])
    for job in jobs:
        backdate(db, app, job.id, 3600)
    app.sync_client.set_aging("q", 1)
    conn = db
    assert store.job_age_pending(conn, 100) == {}


def starved_start(app: App, aging: float | None, watch: float) -> tuple[float | None, int]:
    """One slot drains a queue fed faster than it runs with priority-0 jobs; a priority-5 job
    waits among them.  Returns when it started (seconds after it was enqueued; None: not
    within ``watch`` seconds) and how many priority-0 jobs ran before it."""
    started: dict[str, float] = {}
    ran_before = 0

    @app.task(name="fast", queue="q")
    async def fast(n: int) -> None:
        nonlocal ran_before
        if "low" not in started:
            ran_before += 1
        await asyncio.sleep(0.02)

    @app.task(name="low", queue="q")
    async def low() -> None:
        started["low"] = time.monotonic()

    app.sync_client.set_aging("q", aging)
    fast.enqueue_many([{"n": n} for n in range(50)])
    worker = Worker(app, concurrency=1, poll_interval=0.1)

    async def main() -> float:
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.3)
        enqueued = time.monotonic()
        await low.with_options(priority=5).enqueue_async()
        deadline = enqueued + watch
        n = 50
        while time.monotonic() < deadline and "low" not in started:
            # A stream of better jobs: always more of them pending than the slot can run.
            await fast.enqueue_many_async([{"n": n + i} for i in range(10)])
            n += 10
            await asyncio.sleep(0.1)
        worker.stop()
        await task
        return enqueued

    enqueued = asyncio.run(main())
    return (started["low"] - enqueued if "low" in started else None), ran_before


def test_with_aging_a_low_priority_job_starts_under_a_stream_of_better_ones(app: App) -> None:
    # Five levels at 0.2 s a step: about a second, plus the leader's rounds (0.1 s) and the
    # claim cursor's return to the top of the index (at most a second).
    waited, _ = starved_start(app, aging=0.2, watch=15)
    assert waited is not None, "the priority-5 job never started with aging on"
    assert waited < 6, f"it started {waited:.1f}s after it was enqueued"


def test_without_aging_priority_is_strict_and_starves(app: App) -> None:
    waited, ran_before = starved_start(app, aging=None, watch=4)
    assert waited is None, f"the priority-5 job started after {waited:.1f}s without aging"
    assert ran_before > 50, "the stream did not keep the slot busy: the check proves nothing"


def test_a_keyed_job_ages_from_its_turn_and_then_goes_before_the_other_keys(
    app: App, store: SyncStore, db: Any
) -> None:
    """Jobs with a ``fair_key`` age as the others do, counted from their turn (their run_at):
    a tenant's worse-priority job that waited past the steps reaches the best pending priority,
    and, its turn being the oldest there, is claimed before the other tenants' jobs."""

    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    big = t.with_options(fair_key="big", priority=2).enqueue_many([{"n": n} for n in range(20)])
    (small,) = t.with_options(fair_key="small", priority=9).enqueue_many([{"n": 99}])
    conn = db
    claimed_first = store.job_claim(conn, ["q"], 1, "w", 30.0)
    assert [j.id for j in claimed_first] == [big[0].id]  # strict priority: the keys' turns
    backdate(db, app, small.id, 3600)
    app.sync_client.set_aging("q", 10)
    assert store.job_age_pending(conn, 100) == {"q": 1}
    assert priority_and_meta(db, app, small.id) == (2, {"skiplock_aged_from": 9})
    assert [j.id for j in store.job_claim(conn, ["q"], 2, "w", 30.0)] == [small.id, big[1].id]
