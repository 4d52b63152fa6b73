"""Due work flows at the claim rate (issue 46, item 1): scheduled jobs and retries whose run_at
has come, and expired leases, are all made claimable in one maintenance step however many
there are, and an idle worker starts a scheduled job within its claim latency of its run_at,
not up to a poll interval later.  Times are read on the database's clock."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

from helpers.polling import wait_for_async
from helpers.stores import sync_store
from skiplock import App, Worker

MANY = 4000  # four times the promotion's (and the reclaim's) batch


def wait_until_due(db: Any, table: str, column: str) -> None:
    """Sleep until the database's clock has passed every value of ``column``."""
    (left,) = db.execute(
        f"SELECT extract(epoch FROM max({column}) - now())::float8 FROM {table}"
    ).fetchone()
    time.sleep(max(0.0, left) + 0.05)


def test_one_promotion_makes_every_due_scheduled_job_claimable(app: App, db: Any) -> None:
    @app.task(name="later")
    def later(n: int) -> None: ...

    later.with_options(delay=0.3).enqueue_many([{"n": n} for n in range(MANY)])
    wait_until_due(db, f'"{app.schema}".jobs', "run_at")
    store = sync_store(app)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        assert store.job_promote_due(conn) == {"default": MANY}
        assert len(store.job_claim(conn, ["default"], MANY, "w", 30)) == MANY


def test_one_reclaim_requeues_every_expired_lease(app: App, db: Any) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": n} for n in range(MANY)])
    store = sync_store(app)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        assert len(store.job_claim(conn, ["default"], MANY, "dead", 0.2)) == MANY
        wait_until_due(db, f'"{app.schema}".jobs', "locked_until")
        reclaimed = store.job_reclaim_expired(conn)
    assert len(reclaimed) == MANY and set(reclaimed.values()) == {"pending"}


def test_an_idle_worker_starts_scheduled_jobs_on_time(app: App, db: Any) -> None:
    """Three jobs due 0.35 s apart, spread over the poll interval: promoted once a poll
    interval, at least one would start over 0.6 s late whatever the phase of the rounds."""

    @app.task(name="on_time")
    def on_time(n: int) -> None: ...

    worker = Worker(app, concurrency=2, poll_interval=1.0, leader_ttl=1.0)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: bool(worker.elector and worker.elector.is_leader), 10)
            await asyncio.sleep(0.3)  # idle: the leader's first round is over
            for n, delay in enumerate((0.5, 0.85, 1.2)):
                await on_time.with_options(delay=delay).enqueue_async(n=n)
            await wait_for_async(lambda: worker.stats.finished >= 3, 10)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)

    asyncio.run(main())
    late = db.execute(
        f"SELECT extract(epoch FROM locked_at - run_at)::float8 "
        f'FROM "{app.schema}".jobs WHERE status = %s ORDER BY run_at',
        ("done",),
    ).fetchall()
    assert len(late) == 3
    # Never early; late by the wake-up and the claim only (a few ms on an idle machine; the
    # bound leaves room for a loaded 2-core one).
    assert all(0 <= lateness < 0.3 for (lateness,) in late), late
