"""Which failures are retried: ``retry_on``, ``no_retry_on`` and ``raise Fail``, run by a real
Worker (lease and held-lock models) on a real server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from skiplock import (
    App,
    ConfigurationError,
    Fail,
    FixedDelay,
    JobContext,
    JobStatus,
    JobTimeout,
    Worker,
    WorkerStats,
)


class Unavailable(ConnectionError):
    """A subclass: listing its base in retry_on / no_retry_on covers it."""


def burst(app: App) -> WorkerStats:
    return asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))


def final(app: App, job_id: int) -> tuple[JobStatus, int, str]:
    job = app.get_job(job_id)
    assert job is not None
    return job.status, job.attempts, job.last_error or ""


@pytest.mark.parametrize("model", ["lease", "held"])
def test_only_exceptions_in_retry_on_are_retried(app: App, db: Any, model: str) -> None:
    raised = [Unavailable("db down"), TimeoutError("slow"), ValueError("bad row 7")]
    calls: list[str] = []

    @app.task(
        name="sync_rows",
        model=model,  # type: ignore[arg-type]
        max_attempts=5,
        retry=FixedDelay(0),
        retry_on=(ConnectionError, TimeoutError),
    )
    def sync_rows() -> None:
        exc = raised[len(calls)]
        calls.append(type(exc).__name__)
        raise exc

    job_id = sync_rows.enqueue().id
    stats = burst(app)
    assert calls == ["Unavailable", "TimeoutError", "ValueError"]
    assert (stats.retried, stats.failed) == (2, 1)
    status, attempts, error = final(app, job_id)
    assert (status, attempts) == (JobStatus.FAILED, 3)
    first, note = error.split("\n\n")[:2]
    assert first == "ValueError: bad row 7"
    assert note == "not retried: ValueError is not in the task's retry_on (attempt 3 of 5)"
    assert "Traceback (most recent call last)" in error


def test_no_retry_on_fails_at_once_and_wins_over_retry_on(app: App, db: Any) -> None:
    calls: list[int] = []

    @app.task(
        name="charge",
        max_attempts=5,
        retry=FixedDelay(0),
        retry_on=OSError,
        no_retry_on=[ConnectionError],
    )
    def charge(card: str) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise FileNotFoundError("receipt template")  # an OSError: retried
        raise Unavailable(f"card {card} declined")  # a ConnectionError: not retried

    job_id = charge.enqueue(card="4242").id
    stats = burst(app)
    assert len(calls) == 2
    assert (stats.retried, stats.failed, stats.done) == (1, 1, 0)
    status, attempts, error = final(app, job_id)
    assert (status, attempts) == (JobStatus.FAILED, 2)
    assert "not retried: Unavailable is in the task's no_retry_on (attempt 2 of 5)" in error


def test_other_tasks_keep_retrying_every_exception(app: App, db: Any) -> None:
    calls: list[int] = []

    @app.task(name="plain", max_attempts=3, retry=FixedDelay(0))
    def plain() -> None:
        calls.append(1)
        raise ValueError("always")

    job_id = plain.enqueue().id
    burst(app)
    status, attempts, error = final(app, job_id)
    assert (status, attempts, len(calls)) == (JobStatus.FAILED, 3, 3)
    assert "not retried" not in error


@pytest.mark.parametrize("model", ["lease", "held"])
def test_raise_fail_ends_the_job_now_with_its_cause(app: App, db: Any, model: str) -> None:
    db.execute(f'CREATE TABLE "{app.schema}".side (n int)')
    calls: list[int] = []

    @app.task(
        name="refund",
        model=model,  # type: ignore[arg-type]
        max_attempts=5,
        retry=FixedDelay(0),
        pass_context=True,
    )
    async def refund(ctx: JobContext, order_id: int) -> None:
        calls.append(order_id)
        if ctx.conn is not None:  # held lock: this write must roll back with the failure
            await ctx.conn.execute(f'INSERT INTO "{app.schema}".side VALUES (1)')
        try:
            {}[order_id]
        except KeyError as exc:
            raise Fail(f"order {order_id} no longer exists") from exc

    job_id = refund.enqueue(order_id=9).id
    stats = burst(app)
    assert calls == [9]
    assert (stats.failed, stats.retried) == (1, 0)
    status, attempts, error = final(app, job_id)
    assert (status, attempts) == (JobStatus.FAILED, 1)
    assert error.startswith(
        "Fail: order 9 no longer exists\n\nnot retried: the task raised Fail (attempt 1 of 5)"
    )
    assert "KeyError: 9" in error  # the cause's traceback is kept
    assert db.execute(f'SELECT count(*) FROM "{app.schema}".side').fetchone() == (0,)

    # An admin can still give it another attempt: it runs (and gives up) once more.
    app.retry_job(job_id)
    burst(app)
    assert calls == [9, 9]
    assert final(app, job_id)[:2] == (JobStatus.FAILED, 2)


@pytest.mark.parametrize("retried", [False, True])
def test_timeouts_follow_retry_on_like_any_exception(app: App, db: Any, retried: bool) -> None:
    retry_on = (ConnectionError, JobTimeout) if retried else (ConnectionError,)

    @app.task(name="slow", timeout=0.1, max_attempts=2, retry=FixedDelay(0), retry_on=retry_on)
    async def slow() -> None:
        await asyncio.sleep(5)

    job_id = slow.enqueue().id
    stats = burst(app)
    status, attempts, error = final(app, job_id)
    assert status is JobStatus.FAILED
    assert error.startswith("JobTimeout: the task ran longer than its timeout of 0.1s")
    if retried:
        assert (attempts, stats.timed_out, stats.retried) == (2, 2, 1)
        assert "not retried" not in error
    else:
        assert (attempts, stats.timed_out, stats.retried) == (1, 1, 0)
        assert "not retried: JobTimeout is not in the task's retry_on (attempt 1 of 2)" in error
        assert error.count("JobTimeout: the task ran") == 1  # no traceback to repeat it


@pytest.mark.parametrize(
    ("option", "value"),
    [("retry_on", "ValueError"), ("retry_on", [ValueError, 3]), ("no_retry_on", int)],
)
def test_retry_options_take_exception_classes_only(app: App, option: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=f"{option} takes exception classes"):
        app.task(name="bad", **{option: value})(lambda: None)
    assert "bad" not in app.tasks
