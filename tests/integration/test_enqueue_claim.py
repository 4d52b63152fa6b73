"""Enqueue and claim against a real server: the basics every other test builds on."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from helpers.stores import SyncStore
from skiplock import App, JobStatus

pytestmark = pytest.mark.smoke


def test_enqueue_then_claim_returns_the_job_running_with_one_attempt(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="send", queue="mail")
    def send(to: str) -> None: ...

    enqueued = send.enqueue(to="a@example.com")
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        jobs = store.job_claim(conn, ["mail"], 10, "w1", 30)
    assert [j.id for j in jobs] == [enqueued.id]
    job = jobs[0]
    assert job.status is JobStatus.RUNNING
    assert job.payload == {"to": "a@example.com"}
    assert (job.attempts, job.locked_by, job.task, job.queue) == (1, "w1", "send", "mail")
    assert job.locked_until is not None


def test_claim_orders_by_priority_then_run_at(app: App, store: SyncStore) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    now = datetime.now(UTC)
    t.with_options(priority=5, run_at=now - timedelta(seconds=3)).enqueue(n=1)
    t.with_options(priority=0, run_at=now - timedelta(seconds=1)).enqueue(n=2)
    t.with_options(priority=0, run_at=now - timedelta(seconds=2)).enqueue(n=3)
    t.with_options(priority=-1, run_at=now).enqueue(n=4)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        order = [store.job_claim(conn, ["default"], 1, "w", 30)[0].payload["n"] for _ in range(4)]
    assert order == [4, 3, 2, 1]


def test_future_jobs_are_not_claimed_until_due_and_promoted(app: App, store: SyncStore) -> None:
    @app.task(name="later")
    def later() -> None: ...

    job = later.with_options(delay=3600).enqueue()
    run_at = app.get_job(job.id).run_at  # type: ignore[union-attr]
    s = store
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        assert s.job_claim(conn, ["default"], 10, "w", 30) == []
        # The statement runs at a pinned time rather than after a sleep.
        assert s.job_promote_due(conn) == {}
        assert s.job_promote_due(conn, now=run_at - timedelta(microseconds=1)) == {}
        assert s.job_claim(conn, ["default"], 10, "w", 30) == []
        assert s.job_promote_due(conn, now=run_at) == {"default": 1}
        assert len(s.job_claim(conn, ["default"], 10, "w", 30)) == 1


def test_claim_takes_only_its_queues_and_batches(app: App, store: SyncStore) -> None:
    @app.task(name="a", queue="qa")
    def a() -> None: ...

    @app.task(name="b", queue="qb")
    def b() -> None: ...

    @app.task(name="c", queue="qc")
    def c() -> None: ...

    a.enqueue_many([{}] * 3)
    b.enqueue_many([{}] * 3)
    c.enqueue_many([{}] * 3)
    s = store
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        first = s.job_claim(conn, ["qa", "qb"], 4, "w", 30)
        assert len(first) == 4 and {j.queue for j in first} <= {"qa", "qb"}
        rest = s.job_claim(conn, ["qa", "qb"], 10, "w", 30)
        assert len(rest) == 2
        assert s.job_claim(conn, ["qa", "qb"], 10, "w", 30) == []
        assert len(s.job_claim(conn, ["qc"], 10, "w", 30)) == 3


def test_enqueue_many_inserts_thousands_in_one_statement(app: App, db: Any) -> None:
    @app.task(name="bulk")
    def bulk(i: int) -> None: ...

    results = bulk.enqueue_many([{"i": i} for i in range(5000)])
    assert len(results) == 5000
    ids = [r.id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 5000
    rows = db.execute(f"SELECT id, payload->>'i' FROM \"{app.schema}\".jobs ORDER BY id").fetchall()
    assert [int(i) for _, i in rows] == list(range(5000))
    assert [r[0] for r in rows] == ids


def test_async_enqueue_and_app_enqueue_by_name(app: App, db: Any) -> None:
    @app.task(name="ping")
    async def ping(n: int) -> None: ...

    async def go() -> list[int]:
        first = await ping.enqueue_async(n=1)
        more = await app.enqueue_many_async("ping", [{"n": 2}, {"n": 3}], priority=3)
        await app.close_async()
        return [first.id, *(m.id for m in more)]

    ids = asyncio.run(go())
    ids.append(app.enqueue("ping", {"n": 4}, queue="other").id)
    rows = db.execute(f'SELECT id, queue, priority FROM "{app.schema}".jobs ORDER BY id').fetchall()
    assert [r[0] for r in rows] == ids
    assert [(r[1], r[2]) for r in rows] == [
        ("default", 0),
        ("default", 3),
        ("default", 3),
        ("other", 0),
    ]
