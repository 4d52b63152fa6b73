"""Helpers for your own tests: what did my code enqueue, and run what is due, now.

They work on your test database like the rest of skiplock (there is no fake queue: SKIP
LOCKED, NOTIFY and transactions cannot be faked faithfully).

- :func:`enqueued`, :func:`assert_enqueued`, :func:`assert_not_enqueued` find the jobs
  of a task not yet started (waiting, scheduled or pending) whose payload contains the given
  fields (JSON containment, ``@>``: nested objects match by their own fields).  Given
  ``conn``, they read in that connection's transaction, so they see jobs a test enqueued and
  never committed (Django's ``TestCase``, a rolled-back SQLAlchemy session).
- :func:`drain` (and :func:`drain_async`) runs a burst worker in this process until no job of
  the queues is due (scheduled jobs whose time has come included), and returns what it did;
  ``with_scheduled=True`` also runs jobs scheduled for later and retries waiting out their
  backoff, at once, until none is left.  Its workers use their own connections: they see only
  committed jobs.

    def test_checkout_sends_a_receipt(db):
        order = checkout(db, cart)
        assert_enqueued(send_receipt, payload={"order_id": order.id}, conn=db)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from skiplock._db.caller_connection import CallerConnection
from skiplock.app import App
from skiplock.events import WorkerStats
from skiplock.job import Job
from skiplock.task import Task
from skiplock.worker import Worker

__all__ = ["assert_enqueued", "assert_not_enqueued", "drain", "drain_async", "enqueued"]

SHOWN = 10  # jobs listed in a failed assertion's message


def enqueued(
    task: Task[Any, Any],
    *,
    payload: dict[str, Any] | None = None,
    queue: str | None = None,
    conn: CallerConnection | None = None,
) -> list[Job]:
    """The waiting jobs of ``task`` whose payload contains ``payload``, oldest first (its
    values as the task's serializer writes them: ``payload={"due": date(2026, 1, 5)}``)."""
    wanted = payload or {}
    if wanted and task.encode_default is not None:
        wanted = json.loads(json.dumps(wanted, default=task.encode_default))
    return task.app.sync_client.find_waiting(task.name, wanted, queue, conn)


def assert_enqueued(
    task: Task[Any, Any],
    *,
    payload: dict[str, Any] | None = None,
    queue: str | None = None,
    count: int | None = None,
    conn: CallerConnection | None = None,
) -> Job:
    """Fail unless a waiting job of ``task`` has a payload containing ``payload`` (exactly
    ``count`` of them, if given); returns the newest.  The message lists what was enqueued."""
    found = enqueued(task, payload=payload, queue=queue, conn=conn)
    if found and (count is None or len(found) == count):
        return found[-1]
    wanted = "a job" if count is None else f"{count} job(s)"
    raise AssertionError(
        f"expected {wanted} of task {task.name!r}{_matching(payload, queue)}, found "
        f"{len(found)}; {_waiting(task, conn)}"
    )


def assert_not_enqueued(
    task: Task[Any, Any],
    *,
    payload: dict[str, Any] | None = None,
    queue: str | None = None,
    conn: CallerConnection | None = None,
) -> None:
    """Fail if a waiting job of ``task`` has a payload containing ``payload``."""
    found = enqueued(task, payload=payload, queue=queue, conn=conn)
    if found:
        raise AssertionError(
            f"expected no job of task {task.name!r}{_matching(payload, queue)}, found "
            f"{len(found)}: {_listed(found)}"
        )


def drain(
    app: App,
    *,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    concurrency: int = 1,
    max_rounds: int = 100,
) -> WorkerStats:
    """Run the due jobs of ``queues`` (default: all the app's) in this process until none is
    left, and return what the workers did (see the module's doc).  From async code (a running
    event loop), use :func:`drain_async`."""
    return asyncio.run(
        drain_async(
            app, queues=queues, with_scheduled=with_scheduled, concurrency=concurrency,
            max_rounds=max_rounds,
        )
    )  # fmt: skip


async def drain_async(
    app: App,
    *,
    queues: Sequence[str] | None = None,
    with_scheduled: bool = False,
    concurrency: int = 1,
    max_rounds: int = 100,
) -> WorkerStats:
    """:func:`drain` for async tests.  With ``with_scheduled``, each round makes the scheduled
    jobs due and runs a burst worker, until a round claims nothing; a task that snoozes
    forever raises :class:`RuntimeError` after ``max_rounds`` rounds instead of looping."""
    names = list(queues) if queues else sorted({t.queue for t in app.tasks.values()})
    total = WorkerStats()
    for _ in range(max_rounds):
        if with_scheduled:  # (a burst worker promotes the jobs whose time has come itself)
            await app.async_client.make_scheduled_due(names)
        worker = Worker(app, queues=names, concurrency=concurrency, prefetch=0, burst=True)
        stats = await worker.run()
        for field in fields(WorkerStats):
            setattr(total, field.name, getattr(total, field.name) + getattr(stats, field.name))
        if not with_scheduled or stats.claimed == 0:
            return total
    raise RuntimeError(
        f"jobs of {names} still ran after {max_rounds} rounds of drain(with_scheduled=True) "
        f"({total}): does a task snooze or retry forever?"
    )


def _matching(payload: dict[str, Any] | None, queue: str | None) -> str:
    parts = [f" with a payload containing {payload!r}"] if payload else []
    if queue is not None:
        parts.append(f" in queue {queue!r}")
    return "".join(parts)


def _waiting(task: Task[Any, Any], conn: CallerConnection | None) -> str:
    every = enqueued(task, conn=conn)
    if not every:
        return "no job of that task is waiting"
    return f"the waiting jobs of that task: {_listed(every)}"


def _listed(jobs: list[Job]) -> str:
    shown = ", ".join(f"#{j.id} {j.queue} {j.payload!r}" for j in jobs[-SHOWN:])
    return shown + (f" (and {len(jobs) - SHOWN} older)" if len(jobs) > SHOWN else "")
