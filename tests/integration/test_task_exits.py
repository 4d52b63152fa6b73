"""A task that raises SystemExit or KeyboardInterrupt fails its own job; the worker and the other
jobs carry on (one job may stop nothing but itself)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from skiplock import App, Worker


@pytest.mark.parametrize("model", ["lease", "held"])
@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
def test_a_task_that_exits_fails_its_job_alone(
    app: App, db: Any, model: str, kind: str, raised: type[BaseException]
) -> None:
    ran: list[int] = []

    if kind == "sync":

        @app.task(name="t", max_attempts=1)
        def t(n: int) -> None:
            if n == 0:
                raise raised(3) if raised is SystemExit else raised()
            ran.append(n)

    else:

        @app.task(name="t", max_attempts=1)
        async def t(n: int) -> None:  # type: ignore[misc]
            if n == 0:
                raise raised(3) if raised is SystemExit else raised()
            ran.append(n)

    jobs = t.enqueue_many([{"n": n} for n in range(6)])
    worker = Worker(app, burst=True, model=model, concurrency=2)  # type: ignore[arg-type]
    stats = asyncio.run(asyncio.wait_for(worker.run(), 60))
    assert sorted(ran) == [1, 2, 3, 4, 5]
    rows = dict(
        db.execute(
            f'SELECT id, status FROM "{app.schema}".jobs WHERE id = ANY(%s)',
            [[j.id for j in jobs]],
        ).fetchall()
    )
    assert rows[jobs[0].id] == "failed", rows
    assert all(rows[j.id] == "done" for j in jobs[1:]), rows
    (error,) = db.execute(
        f'SELECT last_error FROM "{app.schema}".jobs WHERE id = %s', [jobs[0].id]
    ).fetchone()
    assert raised.__name__ in error, error
    assert stats.failed == 1 and stats.done == 5
    assert sys.exc_info() == (None, None, None)
