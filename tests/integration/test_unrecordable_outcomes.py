"""An outcome the database refuses to record (a snooze past what the table holds) must not hold
up the outcomes written with it: a lease worker writes outcomes in batches, and a refused batch
used to go back to the front of its buffer and fail again every second, so that no outcome of
that worker was recorded any more, and every job it ran waited for its lease to expire."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from helpers.bad_rows import job_state
from skiplock import App, Retry, Worker
from skiplock._task_settings import WorkerModel

GOOD = 9
RUN_TIMEOUT = 60.0
MAX_INT = 2**31 - 1


def run_burst(app: App, model: WorkerModel) -> Any:
    worker = Worker(app, burst=True, model=model, poll_interval=0.2, concurrency=4)
    return asyncio.run(asyncio.wait_for(worker.run(), RUN_TIMEOUT))


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_snooze_of_a_job_with_the_most_attempts_is_recorded(
    app: App, db: psycopg.Connection[Any], model: WorkerModel
) -> None:
    """enqueue accepts max_attempts up to 2**31 - 1, and a snooze gives the job one attempt
    more: that overflowed the column, and the snooze was refused."""
    ran: list[int] = []

    @app.task(name="work", queue="q", model=model)
    def work(n: int) -> None:
        if n == 0:
            raise Retry(delay=3600)
        ran.append(n)

    bad = work.with_options(max_attempts=MAX_INT).enqueue(n=0).id  # type: ignore[attr-defined]
    good = [work.enqueue(n=n).id for n in range(1, GOOD + 1)]  # type: ignore[attr-defined]
    stats = run_burst(app, model)

    assert sorted(ran) == list(range(1, GOOD + 1))
    assert {job_state(db, app.schema, i)[0] for i in good} == {"done"}
    assert job_state(db, app.schema, bad)[0] == "scheduled"
    assert (stats.done, stats.snoozed) == (GOOD, 1)


@pytest.mark.parametrize("model", ["lease", "held"])
def test_an_outcome_the_database_refuses_fails_its_own_job_only(
    app: App, db: psycopg.Connection[Any], model: WorkerModel
) -> None:
    """A snooze delay past the years a timestamp holds (a task may take it from a remote
    service's Retry-After): the job fails saying so, the others are recorded."""
    ran: list[int] = []

    @app.task(name="work", queue="q", model=model, max_attempts=1)
    def work(n: int) -> None:
        if n == 0:
            raise Retry(delay=1e300)
        ran.append(n)

    ids = [work.enqueue(n=n).id for n in range(GOOD + 1)]  # type: ignore[attr-defined]
    run_burst(app, model)

    assert sorted(ran) == list(range(1, GOOD + 1))
    states = [job_state(db, app.schema, i) for i in ids]
    assert [s[0] for s in states[1:]] == ["done"] * GOOD
    status, _, error = states[0]
    assert status == "failed", states[0]
    if model == "lease":  # (a held-lock job's transaction rolls back: it is counted apart)
        assert error.startswith("its outcome (snooze) could not be recorded: "), error
        assert "out of range" in error
