"""What a worker reports: one event per job start and finish, counters, and the log line.

Each finished job is logged as one ``key=value`` line (job id, task, queue, attempt, outcome,
duration, first line of the error).  Payloads are never logged.  ``Worker(on_event=...)``
receives the same events, for metrics.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from dataclasses import dataclass, fields
from typing import Literal

from skiplock.job import Job

log: logging.Logger = logging.getLogger("skiplock.worker")

Outcomes = Literal["done", "retry", "failed", "snooze", "cancelled", "release", "lost"]


def new_worker_id() -> str:
    """Unique per process start, so a restarted worker never passes for its predecessor."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(frozen=True)
class JobEvent:
    """``started`` when a job is claimed into a slot; ``finished`` once its outcome is recorded
    (``lost`` when its claim had been taken away, so the outcome did not count)."""

    kind: Literal["started", "finished"]
    job: Job
    worker_id: str
    outcome: Outcomes | None = None
    duration: float | None = None
    error: str | None = None


@dataclass
class WorkerStats:
    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    snoozed: int = 0
    cancelled: int = 0
    released: int = 0
    lost: int = 0
    timed_out: int = 0

    _COUNTER = {
        "done": "done", "retry": "retried", "failed": "failed", "snooze": "snoozed",
        "cancelled": "cancelled", "release": "released", "lost": "lost",
    }  # fmt: skip

    @property
    def finished(self) -> int:
        """Attempts whose outcome was recorded (released and lost ones not counted)."""
        return self.done + self.retried + self.failed + self.snoozed + self.cancelled

    def count(self, outcome: str) -> None:
        name = self._COUNTER[outcome]
        setattr(self, name, getattr(self, name) + 1)

    def __str__(self) -> str:
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


def finished_level(outcome: str) -> int:
    """A job that did what was asked is routine (DEBUG); a retry, a cancellation or a job given
    back at shutdown is worth a line (INFO); a job that failed for good or whose outcome did not
    count is a WARNING."""
    if outcome in ("failed", "lost"):
        return logging.WARNING
    if outcome in ("retry", "cancelled", "release"):
        return logging.INFO
    return logging.DEBUG


def log_event(event: JobEvent) -> None:
    # Listeners (metrics) get every event: build the log line's fields only for a level that
    # is logged, as log.debug would itself have skipped its arguments.
    level = logging.DEBUG if event.kind == "started" else finished_level(event.outcome or "done")
    if not log.isEnabledFor(level):
        return
    job = event.job
    # (keywords, not string keys: a literal named like a statement reads as one to the SQL tests)
    fields = dict(job_id=job.id, task=job.task, queue=job.queue, attempt=job.attempts,
                  max_attempts=job.max_attempts)  # fmt: skip
    if event.kind == "started":
        log.debug(
            "event=started job_id=%s task=%s queue=%s attempt=%s/%s worker=%s",
            job.id, job.task, job.queue, job.attempts, job.max_attempts, event.worker_id,
            extra={"event": "started", **fields, "worker": event.worker_id},
        )  # fmt: skip
        return
    first_line = event.error.splitlines()[0] if event.error else None
    error = f" error={first_line!r}" if first_line is not None else ""
    duration_ms = (event.duration or 0.0) * 1000
    extra = {"event": "finished", **fields, "outcome": event.outcome, "duration_ms": duration_ms}
    if first_line is not None:
        extra["error"] = first_line
    log.log(
        level,
        "event=finished job_id=%s task=%s queue=%s attempt=%s/%s outcome=%s duration_ms=%.1f%s",
        job.id, job.task, job.queue, job.attempts, job.max_attempts, event.outcome,
        duration_ms, error, extra=extra,
    )  # fmt: skip
