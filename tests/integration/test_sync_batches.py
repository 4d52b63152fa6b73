"""Sync tasks whose outcomes come back in batches, with a real Worker on a real server: a worker
stopped while a batch of sync jobs runs loses none of them, and a slow sync job among quick ones
times out alone while the quick ones go on (docs/design.md, "Sync tasks in batches")."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from helpers.polling import wait_for_async
from skiplock import App, JobContext, Worker


def statuses(db: Any, app: App) -> dict[str, int]:
    return dict(
        db.execute(f'SELECT status, count(*) FROM "{app.schema}".jobs GROUP BY status').fetchall()
    )


def test_a_worker_stopped_mid_batch_loses_no_sync_job(app: App, db: Any) -> None:
    """Stopped while thousands of quick sync jobs drain: every job that ran is recorded done
    (once), every other is back to pending with its attempt unspent; none is left running."""
    ran: list[int] = []
    lock = threading.Lock()

    @app.task(name="quick")
    def quick(n: int) -> None:
        with lock:
            ran.append(n)

    quick.enqueue_many([{"n": n} for n in range(3000)])
    worker = Worker(app, concurrency=10, poll_interval=0.05)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        await wait_for_async(lambda: len(ran) >= 300, 30.0, lambda: worker.stats)
        worker.stop()
        await asyncio.wait_for(task, 30)

    asyncio.run(main())
    rows = statuses(db, app)
    assert "running" not in rows, rows
    assert rows.get("done", 0) == len(ran) == len(set(ran)), (rows, len(ran))
    assert rows.get("done", 0) + rows.get("pending", 0) == 3000, rows
    assert rows.get("pending", 0) > 0, "the worker drained everything before it was stopped"
    (spent,) = db.execute(
        f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE status = 'pending' AND attempts <> 0"
    ).fetchone()
    assert spent == 0
    assert worker.stats.done == len(ran)


def test_a_slow_sync_job_among_quick_ones_times_out_alone(app: App, db: Any) -> None:
    """After many quick sync jobs (the threads take them as quick), one that blocks past its
    timeout sees ``ctx.cancelled``, fails alone, and the quick jobs queued with it run."""
    release = threading.Event()
    seen: list[bool] = []

    @app.task(name="quick")
    def quick(n: int) -> None:
        pass

    @app.task(name="slow", timeout=0.3, max_attempts=1, pass_context=True)
    def slow(ctx: JobContext) -> None:
        seen.append(ctx.cancelled.wait(10))
        release.wait(10)

    quick.enqueue_many([{"n": n} for n in range(500)])
    slow_id = slow.with_options(priority=-1).enqueue().id  # after the first quick ones
    quick.with_options(priority=-2).enqueue_many([{"n": n} for n in range(500, 1000)])
    worker = Worker(app, concurrency=4, poll_interval=0.05)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(
                lambda: worker.stats.done == 1000 and worker.stats.timed_out == 1,
                30.0,
                lambda: worker.stats,
            )
        finally:
            release.set()
            worker.stop()
            await asyncio.wait_for(task, 15)

    asyncio.run(main())
    assert seen == [True]
    assert statuses(db, app) == {"done": 1000, "failed": 1}
    (error,) = db.execute(
        f'SELECT last_error FROM "{app.schema}".jobs WHERE id = %s', [slow_id]
    ).fetchone()
    assert "JobTimeout" in error, error
