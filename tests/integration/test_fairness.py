"""Fair shares with real workers: a worker serving several queues takes turns between them,
and jobs with a fair_key share the throughput of their queue with the other keys (strict
priority and oldest-first stay inside a queue, inside a key)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from skiplock import App, Worker

pytestmark = pytest.mark.smoke


def run_burst(app: App, **options: Any) -> None:
    asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05, **options).run(), 60))


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_worker_of_several_queues_takes_turns_between_them(app: App, model: str) -> None:
    ran: list[tuple[str, int]] = []

    @app.task(name="ta", queue="qa")
    def ta(n: int) -> None:
        ran.append(("qa", n))

    @app.task(name="tb", queue="qb")
    def tb(n: int) -> None:
        ran.append(("qb", n))

    # qa's backlog is older and of a better priority: a global order would run all of it first.
    ta.with_options(priority=-1).enqueue_many([{"n": i} for i in range(120)])
    tb.enqueue_many([{"n": i} for i in range(5)])
    run_burst(app, queues=["qa", "qb"], concurrency=1, prefetch=20, model=model)
    assert len(ran) == 125
    last_b = max(i for i, (q, _) in enumerate(ran) if q == "qb")
    assert last_b < 30, f"queue qb's 5 jobs ran only after {last_b - 4} of qa's"
    # Inside a queue, the order stays strict.
    assert [n for q, n in ran if q == "qa"] == list(range(120))
    assert [n for q, n in ran if q == "qb"] == list(range(5))


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_worker_gives_its_queues_shares_by_their_weights(app: App, model: str) -> None:
    """queues={"qa": 3, "qb": 1}: while both have work, qa's jobs take three turns for each of
    qb's, whatever their priorities and ages."""
    ran: list[str] = []

    @app.task(name="ta", queue="qa")
    def ta(n: int) -> None:
        ran.append("qa")

    @app.task(name="tb", queue="qb")
    def tb(n: int) -> None:
        ran.append("qb")

    tb.with_options(priority=-1).enqueue_many([{"n": i} for i in range(200)])
    ta.enqueue_many([{"n": i} for i in range(200)])
    run_burst(app, queues={"qa": 3, "qb": 1}, concurrency=1, prefetch=20, model=model)
    assert len(ran) == 400
    share = ran[:200].count("qa") / 200  # both queues still have work in the first 200
    assert 0.70 <= share <= 0.80, f"queue qa ran {share:.0%} of the first 200 jobs, not 75%"


@pytest.mark.parametrize("queues", [{"qa": 0}, {"qa": -1}, {"qa": 1.5}])
def test_queue_weights_are_positive_integers(app: App, queues: Any) -> None:
    with pytest.raises(ValueError, match="weight"):
        Worker(app, queues=queues)


def test_jobs_with_a_fair_key_share_the_queue_with_the_other_keys(app: App) -> None:
    ran: list[tuple[str, int]] = []

    @app.task(name="work", queue="fq")
    def work(tenant: str, n: int) -> None:
        ran.append((tenant, n))

    work.with_options(fair_key="big").enqueue_many([{"tenant": "big", "n": i} for i in range(1000)])
    for t in range(10):
        tenant = f"small{t}"
        work.with_options(fair_key=tenant).enqueue_many(
            [{"tenant": tenant, "n": i} for i in range(10)]
        )
    run_burst(app, queues=["fq"], concurrency=1, prefetch=50)
    assert len(ran) == 1100
    last_small = max(i for i, (t, _) in enumerate(ran) if t != "big")
    # Turns: each of the 11 keys gets one job of every 11, so the small keys' 100 jobs are done
    # after about 110 jobs, not after the big key's 1000.
    assert last_small < 150, f"the small keys finished only after {last_small} jobs"
    # Inside a key, the order stays oldest first.
    assert [n for t, n in ran if t == "big"] == list(range(1000))
    assert [n for t, n in ran if t == "small3"] == list(range(10))


def test_a_fair_key_keeps_strict_priority_and_mixed_batches_take_turns(app: App) -> None:
    ran: list[tuple[str, int]] = []

    @app.task(name="work", queue="fq")
    def work(tenant: str, n: int) -> None:
        ran.append((tenant, n))

    work.with_options(fair_key="a").enqueue_many([{"tenant": "a", "n": i} for i in range(50)])
    # One mixed batch (job_insert_many): keys "b" and "c", interleaved in the input.
    app.enqueue_many("work", [{"tenant": "b", "n": 0}], fair_key="b")
    urgent = work.with_options(fair_key="a", priority=-5).enqueue(tenant="urgent", n=0)
    run_burst(app, queues=["fq"], concurrency=1, prefetch=10)
    assert ran[0] == ("urgent", 0), "a better priority waited its key's turn"
    assert ("b", 0) in ran[:4], f"key b waited behind key a: {ran[:6]}"
    assert urgent.id > 0


def test_fair_key_bounds_are_checked_at_enqueue_and_by_the_table(app: App, db: Any) -> None:
    @app.task(name="work", queue="fq")
    def work() -> None: ...

    with pytest.raises(ValueError, match="fair_key"):
        work.with_options(fair_key="x" * 513).enqueue()
    with pytest.raises(ValueError, match="fair_key"):
        work.with_options(fair_key="").enqueue()
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_bound_fair_key"):
        db.execute(
            f'INSERT INTO "{app.schema}".jobs (queue, task, payload, fair_key) '
            "VALUES ('fq', 'work', '{}', repeat('x', 513))"
        )
    enqueued = work.with_options(fair_key="tenant:42").enqueue()
    (key,) = db.execute(
        f'SELECT fair_key FROM "{app.schema}".jobs WHERE id = %s', (enqueued.id,)
    ).fetchone()
    assert key == "tenant:42"
