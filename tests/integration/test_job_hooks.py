"""``App.around_job``: context managers around each task call, run by a real Worker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import pytest

from skiplock import App, FixedDelay, Job, JobStatus, Worker, WorkerStats

current_job: ContextVar[int | None] = ContextVar("current_job", default=None)


def burst(app: App) -> WorkerStats:
    return asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))


@pytest.mark.parametrize("model", ["lease", "held"])
def test_hooks_wrap_sync_and_async_tasks_in_order_and_see_failures(
    app: App, db: Any, model: str
) -> None:
    trail: list[tuple[Any, ...]] = []
    hook_threads: dict[int, int] = {}

    @app.around_job
    @contextmanager
    def outer(job: Job) -> Iterator[None]:
        trail.append(("outer in", job.task))
        token = current_job.set(job.id)
        hook_threads[job.id] = threading.get_ident()
        try:
            yield
        except Exception as exc:
            trail.append(("outer saw", type(exc).__name__))
            raise
        finally:
            current_job.reset(token)
            trail.append(("outer out", job.task))

    @app.around_job
    @contextmanager
    def inner(job: Job) -> Iterator[None]:
        trail.append(("inner in", job.task))
        yield
        trail.append(("inner out", job.task))

    seen: dict[str, tuple[int | None, int]] = {}

    @app.task(name="sync_task", model=model)  # type: ignore[arg-type]
    def sync_task() -> None:
        seen["sync"] = (current_job.get(), threading.get_ident())
        trail.append(("run", "sync_task"))

    @app.task(name="async_task", model=model)  # type: ignore[arg-type]
    async def async_task() -> None:
        seen["async"] = (current_job.get(), threading.get_ident())
        trail.append(("run", "async_task"))

    @app.task(name="broken", model=model, max_attempts=2, retry=FixedDelay(0))  # type: ignore[arg-type]
    def broken() -> None:
        raise KeyError("nope")

    sync_id = sync_task.enqueue().id
    async_id = async_task.enqueue().id
    stats = burst(app)
    assert (stats.done, stats.failed) == (2, 0)
    assert seen["sync"] == (sync_id, hook_threads[sync_id])  # in the task's own thread
    assert seen["async"][0] == async_id
    for name in ("sync_task", "async_task"):
        run = trail.index(("run", name))
        assert trail[run - 2 : run + 3] == [
            ("outer in", name),
            ("inner in", name),
            ("run", name),
            ("inner out", name),
            ("outer out", name),
        ]
    assert current_job.get() is None

    trail.clear()
    broken_id = broken.enqueue().id
    stats = burst(app)
    assert (stats.retried, stats.failed) == (1, 1)
    assert trail == [("outer in", "broken"), ("inner in", "broken"), ("outer saw", "KeyError"),
                     ("outer out", "broken")] * 2  # fmt: skip
    job = app.get_job(broken_id)
    assert job is not None and job.status is JobStatus.FAILED


def test_a_hook_that_raises_fails_the_attempt_without_running_the_task(app: App, db: Any) -> None:
    calls: list[int] = []
    refusals: list[int] = []

    @app.around_job
    @contextmanager
    def gate(job: Job) -> Iterator[None]:
        if job.attempts == 1:
            refusals.append(job.id)
            raise RuntimeError("tracing backend not ready")
        yield

    @app.task(name="guarded", max_attempts=3, retry=FixedDelay(0))
    def guarded() -> None:
        calls.append(1)

    job_id = guarded.enqueue().id
    stats = burst(app)
    assert refusals == [job_id]
    assert calls == [1]  # only the second attempt ran
    assert (stats.retried, stats.done) == (1, 1)
    job = app.get_job(job_id)
    assert job is not None and job.status is JobStatus.DONE and job.attempts == 2
    assert (job.last_error or "").startswith("RuntimeError: tracing backend not ready")


def test_hooks_wrap_only_tasks_of_their_own_app(app: App, db: Any) -> None:
    producer = App(app.dsn, app.schema)  # another deploy: it knows a task this worker does not
    entered: list[str] = []

    @app.around_job
    @contextmanager
    def hook(job: Job) -> Iterator[None]:
        entered.append(job.task)
        yield

    @producer.around_job
    @contextmanager
    def foreign(job: Job) -> Iterator[None]:
        entered.append(f"foreign {job.task}")
        yield

    @producer.task(name="ghost", max_attempts=1)
    def ghost() -> None:
        pass

    @app.task(name="plain")
    def plain() -> None:
        pass

    ghost.enqueue()
    plain.enqueue()
    stats = burst(app)
    assert (stats.done, stats.failed) == (1, 1)  # the unknown task's job ran no task, no hook
    assert entered == ["plain"]
