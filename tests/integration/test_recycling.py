"""A worker with --max-jobs / --max-memory stops claiming, runs what it claimed, and returns by
itself: no job given back, none run twice, the rest left to the next worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from skiplock import App, Worker


def counts(db: Any, app: App) -> dict[str, int]:
    rows = db.execute(f'SELECT status, count(*) FROM "{app.schema}".jobs GROUP BY 1').fetchall()
    return dict(rows)


@pytest.mark.parametrize("model", ["lease", "held"])
def test_max_jobs_runs_exactly_that_many_then_returns(app: App, db: Any, model: str) -> None:
    ran: list[int] = []

    @app.task(name="t", queue="q", model=model)  # type: ignore[arg-type]
    async def t(n: int) -> None:
        ran.append(n)

    t.enqueue_many([{"n": n} for n in range(50)])
    worker = Worker(app, concurrency=4, max_jobs=13, poll_interval=0.05)
    stats = asyncio.run(asyncio.wait_for(worker.run(), 30))  # not a burst: it ends by itself
    assert worker.recycled == "claimed its 13 jobs (--max-jobs)"
    assert (stats.claimed, stats.done, stats.released) == (13, 13, 0)
    assert sorted(ran) == list(range(13))  # in claim order, none twice
    assert counts(db, app) == {"done": 13, "pending": 37}
    attempts = db.execute(f'SELECT max(attempts) FROM "{app.schema}".jobs').fetchone()
    assert attempts == (1,)


def test_memory_over_the_limit_stops_claiming_after_the_jobs_in_hand(app: App, db: Any) -> None:
    ran: list[int] = []
    used = [0]

    @app.task(name="grow", queue="q")
    async def grow(n: int) -> None:
        ran.append(n)
        used[0] += 10  # each job leaks 10 "bytes" of the fake gauge
        await asyncio.sleep(0.05)

    grow.enqueue_many([{"n": n} for n in range(40)])
    worker = Worker(app, concurrency=1, prefetch=0, max_memory=45, poll_interval=0.05)
    worker.recycling.memory = lambda: used[0]
    stats = asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert worker.recycled is not None and "over its" in worker.recycled
    # Checked every second: over the limit after 5 jobs, due at the next check, then no claim.
    assert 5 <= stats.done == len(ran) < 40 and stats.released == 0
    assert counts(db, app) == {"done": stats.done, "pending": 40 - stats.done}
