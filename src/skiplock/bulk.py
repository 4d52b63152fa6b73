"""Changing many jobs at once: which jobs (:class:`JobFilter`) and what was done
(:class:`RetriedJobs`, :class:`CancelledJobs`).  Pure values and checks, no I/O.

A bulk retry or cancel walks the matching jobs in id order, :data:`BULK_BATCH` at a time, each
batch a short transaction of its own (see ``sql/admin.sql``).  Jobs changed by a batch stay
changed if a later batch fails: the operation can simply be run again, it only touches jobs
still in the state it changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from skiplock._db.bounds import check_queue_name, check_task_name
from skiplock.job import JobStatus

# Jobs per statement: small enough that a batch's locks and WAL stay short, large enough that a
# million jobs take a thousand statements, not a million.
BULK_BATCH = 1000

RETRYABLE = (JobStatus.FAILED, JobStatus.CANCELLED)
FINISHED = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class JobFilter:
    """Jobs of ``queue`` and of ``task`` (None: any), and for a retry or a delete, finished
    within the last ``finished_within`` seconds and at least ``older_than`` seconds ago (None:
    whenever)."""

    queue: str | None = None
    task: str | None = None
    finished_within: float | None = None
    older_than: float | None = None

    def __post_init__(self) -> None:
        if self.queue is not None:
            check_queue_name(self.queue)
        if self.task is not None:
            check_task_name(self.task)
        within = self.finished_within
        if within is not None and (
            isinstance(within, bool)
            or not isinstance(within, int | float)
            or not (math.isfinite(within) and within > 0)
        ):
            raise ValueError(f"finished_within must be a number of seconds > 0, got {within!r}")
        older = self.older_than
        if older is not None and (
            isinstance(older, bool)
            or not isinstance(older, int | float)
            or not (math.isfinite(older) and older >= 0)
        ):
            raise ValueError(f"older_than must be a number of seconds >= 0, got {older!r}")
        if within is not None and older is not None and older >= within:
            raise ValueError(
                f"no job finished in the last {within:g}s and over {older:g}s ago: "
                "older_than must be less than finished_within"
            )

    def params(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "task": self.task,
            "finished_within": self.finished_within,
            "older_than": self.older_than,
        }

    def describe(self) -> str:
        """The filter in words, for messages: ' of queue mail, task send_receipt'."""
        who = [f"{name} {value}" for name, value in (("queue", self.queue), ("task", self.task))
               if value is not None]  # fmt: skip
        times = []
        if self.finished_within is not None:
            times.append(f"in the last {self.finished_within:g}s")
        if self.older_than is not None:
            times.append(f"over {self.older_than:g}s ago")
        said = f" of {', '.join(who)}" if who else ""
        if times:
            said += ("," if who else "") + " finished " + " and ".join(times)
        return said


def retry_statuses(statuses: Iterable[JobStatus | str]) -> list[str]:
    """The statuses a bulk retry takes jobs from: failed and/or cancelled, nothing else."""
    chosen = []
    for status in statuses:
        value = JobStatus(status)
        if value not in RETRYABLE:
            raise ValueError(f"only failed and cancelled jobs can be retried, not {value.value!r}")
        if value.value not in chosen:
            chosen.append(value.value)
    if not chosen:
        raise ValueError("name at least one status to retry jobs from (failed, cancelled)")
    return chosen


def delete_statuses(statuses: Iterable[JobStatus | str]) -> list[str]:
    """The statuses a bulk delete takes jobs from: done, failed and/or cancelled (finished),
    never one of an unfinished job."""
    chosen = []
    for status in statuses:
        value = JobStatus(status)
        if value not in FINISHED:
            raise ValueError(f"only finished jobs can be deleted, not {value.value!r} ones")
        if value.value not in chosen:
            chosen.append(value.value)
    if not chosen:
        raise ValueError("name at least one status to delete jobs of (done, failed, cancelled)")
    return chosen


@dataclass(frozen=True)
class RetriedJobs:
    """What a bulk retry did: ``retried`` jobs are pending again; ``skipped`` ones stay as they
    were because an unfinished job holds their idempotency key (or a newer job of theirs with the
    same key was retried instead)."""

    retried: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class CancelledJobs:
    """What a bulk cancel did: ``cancelled`` jobs had not started and never will; ``requested``
    running jobs were asked to stop (their workers cancel them at the next heartbeat, or for
    held-lock jobs at once by NOTIFY or within a poll interval)."""

    cancelled: int = 0
    requested: int = 0


@dataclass(frozen=True)
class DeletedJobs:
    """What a bulk delete did: ``deleted`` finished jobs are gone; ``skipped`` ones matched but
    stay: a session had locked their row, or a waiting job depends on them (failed or
    cancelled: gone, they would count as done and let it run)."""

    deleted: int = 0
    skipped: int = 0
