"""A task whose exception message holds what a PostgreSQL text column cannot (a NUL character,
a lone surrogate) fails its own job, with the character escaped in last_error; the outcomes
recorded with it (a lease worker writes them in batches) are not lost."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from helpers.bad_rows import job_state
from skiplock import App, Worker
from skiplock._task_settings import WorkerModel

GOOD = 9
RUN_TIMEOUT = 60.0


@pytest.mark.parametrize("model", ["lease", "held"])
@pytest.mark.parametrize(
    ("message", "stored"),
    [("nul \x00 here", "nul \\x00 here"), ("lone \ud800 surrogate", "lone \\ud800 surrogate")],
    ids=["nul", "surrogate"],
)
def test_an_error_text_can_hold_any_character(
    app: App, db: psycopg.Connection[Any], model: WorkerModel, message: str, stored: str
) -> None:
    ran: list[int] = []

    @app.task(name="work", queue="q", model=model, max_attempts=1)
    def work(n: int) -> None:
        if n == 0:
            raise ValueError(message)
        ran.append(n)

    ids = [work.enqueue(n=n).id for n in range(GOOD + 1)]  # type: ignore[attr-defined]
    worker = Worker(app, burst=True, model=model, poll_interval=0.2, concurrency=4)
    stats = asyncio.run(asyncio.wait_for(worker.run(), RUN_TIMEOUT))

    assert sorted(ran) == list(range(1, GOOD + 1))
    states = [job_state(db, app.schema, i) for i in ids]
    assert [s[0] for s in states] == ["failed"] + ["done"] * GOOD
    assert states[0][2].startswith(f"ValueError: {stored}")
    assert (stats.done, stats.failed) == (GOOD, 1)
