"""The kinds of job outcome, each written by one call: how the completer groups a batch, and
how a held-lock job's outcomes are written on the PostgreSQL store in its claim's transaction
(held-lock jobs are beyond the backend contract: docs/backends.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from skiplock._db.records import FailedAttempt, Snooze, TaskResult
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.execution import Outcome
from skiplock.job import Job

Entry = tuple[Job, Outcome, float]  # the job, how it ended, when it started (monotonic)


def grouped(batch: Sequence[Entry]) -> dict[str, list[Entry]]:
    """The outcomes by the call that writes them: done, result (done with a result to store),
    snooze, cancelled, release, fail (retries and failures)."""
    kinds: dict[str, list[Entry]] = {}
    for entry in batch:
        outcome = entry[1]
        if outcome.kind in ("retry", "failed"):
            group = "fail"
        else:  # done jobs whose tasks returned a result to store are written apart
            group = "result" if outcome.result is not None else outcome.kind
        kinds.setdefault(group, []).append(entry)
    return kinds


def results(entries: list[Entry]) -> list[TaskResult]:
    return [TaskResult(job.claim, o.result) for job, o, _ in entries if o.result is not None]


def snoozes(entries: list[Entry]) -> list[Snooze]:
    return [Snooze(job.claim, o.delay) for job, o, _ in entries]


def failures(entries: list[Entry]) -> list[FailedAttempt]:
    return [
        FailedAttempt(job.claim, o.error or "", o.delay if o.kind == "retry" else None)
        for job, o, _ in entries
    ]


async def write_held(
    store: AsyncStore, conn: AsyncConnection[Any], batch: Sequence[Entry], completion: str
) -> set[int]:
    """Write outcomes on ``conn``, in the transaction the caller holds; the ids still owned."""
    owned: set[int] = set()
    for kind, entries in grouped(batch).items():
        claims = [job.claim for job, _, _ in entries]
        if kind == "done":
            owned |= await store.job_finish_many(conn, claims, completion)
        elif kind == "result":
            owned |= await store.job_finish_with_results_many(conn, results(entries), completion)
        elif kind == "snooze":
            owned |= await store.job_snooze_many(conn, snoozes(entries))
        elif kind == "cancelled":
            owned |= await store.job_cancel_claimed_many(conn, claims)
        elif kind == "release":
            owned |= await store.job_release_many(conn, claims)
        else:
            owned |= set(await store.job_fail_many(conn, failures(entries)))
    return owned
