"""What a job is once it is in the table."""

from __future__ import annotations

import enum
from dataclasses import MISSING, dataclass, fields
from datetime import datetime
from typing import Any, NamedTuple, Self

from skiplock._db.payload import load_json


class JobStatus(enum.StrEnum):
    """The states of a job.

    ``waiting`` (enqueued with ``depends_on``) -> ``pending`` or ``scheduled`` once every job it
    depends on is done, or ``cancelled`` when one of them failed or was cancelled;
    ``scheduled`` -> ``pending`` when its run_at comes; ``pending`` -> ``running`` when a worker
    claims it; ``running`` -> ``done``, back to ``scheduled``/``pending`` for a retry, or
    ``failed`` when its attempts are spent.  ``done``, ``failed`` and ``cancelled`` are final
    (an admin may retry a failed or cancelled job).
    """

    WAITING = "waiting"
    SCHEDULED = "scheduled"
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


ClaimKey = tuple[int, datetime, int]
"""(priority, run_at, id): a job's place in claim order within its queue."""


@dataclass(frozen=True)
class Job:
    """A row of the jobs table.  For a claimed job, ``locked_by`` + ``attempts`` + ``locked_at``
    is the claim.  Its times are timezone-aware datetimes, in UTC when read on skiplock's own
    connections (in the session's zone on a caller's, or behind a transaction-mode pooler).
    Read for display (``get_job``, ``list_jobs``), a row that breaks the table's bounds (one
    from before migration 0015) has the text PostgreSQL sent for a time past year 9999 and
    for JSON Python cannot decode (see docs/security.md)."""

    id: int
    queue: str
    task: str
    payload: dict[str, Any]
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    locked_by: str | None
    locked_until: datetime | None
    locked_at: datetime | None  # when the current claim was made (set by every claim)
    entity_key: str | None
    idempotency_key: str | None
    created_at: datetime
    meta: dict[str, Any] | None = None  # set at enqueue, not passed to the task (see App.task)
    expires_at: datetime | None = None  # not started by then: never claimed, cancelled
    last_error: str | None = None
    finished_at: datetime | None = None
    result: Any = None  # what the task returned, for tasks with store_result=True

    @classmethod
    def from_tuple(cls, row: tuple[Any, ...]) -> Job:
        """A row whose columns are the fields in order (id ... created_at, optionally more)."""
        return cls._from_row(row, row[3])

    @classmethod
    def from_claimed_row(cls, row: tuple[Any, ...]) -> Job:
        """A row of a claim, whose payload is JSON text (see job_claim in jobs.sql); an
        :class:`UnrunnableJob` when the payload cannot be decoded."""
        try:
            payload = load_json(row[3])
        except (RecursionError, ValueError) as exc:
            return UnrunnableJob.of_row(row, f"payload could not be decoded: {undecodable(exc)}")
        return cls._from_row(row, payload)

    @classmethod
    def _from_row(cls, row: tuple[Any, ...], payload: Any) -> Self:
        # A worker makes one Job per claimed row: filling __dict__ at once is faster than the
        # frozen dataclass's __init__ (docs/design.md, "Job rows from __dict__").
        job = object.__new__(cls)
        attrs = job.__dict__
        attrs.update(_OPTIONAL_FIELDS)  # defaults for the fields the row may lack, first
        attrs.update(zip(_FIELD_NAMES, row, strict=False))
        attrs["payload"] = payload
        attrs["status"] = _STATUSES[row[4]]
        return job

    @property
    def claim_key(self) -> ClaimKey:
        """Where the job sits in claim order (the claim index's order within its queue)."""
        return (self.priority, self.run_at, self.id)

    @property
    def claim(self) -> Claim:
        if self.locked_by is None or self.locked_at is None:
            raise ValueError(f"job {self.id} is not claimed")
        return Claim(self.id, self.attempts, self.locked_by, self.locked_at)


@dataclass(frozen=True)
class UnrunnableJob(Job):
    """A claimed row that its worker cannot run as it is: a payload or meta Python cannot
    decode, a time outside Python's datetime (see :mod:`skiplock._db.claimed_rows`).  Its
    ``reason`` says what is wrong; the worker fails it at once, without running it.  Its
    payload is empty, and a time it could not read is the earliest or latest datetime."""

    reason: str = ""

    @classmethod
    def of_row(cls, row: tuple[Any, ...], reason: str) -> UnrunnableJob:
        job = cls._from_row(row, {})
        job.__dict__["reason"] = reason
        return job

    @classmethod
    def of_job(cls, job: Job, reason: str) -> UnrunnableJob:
        """``job`` (perhaps unrunnable already: then both reasons) marked unrunnable."""
        if isinstance(job, UnrunnableJob):
            reason = f"{reason}; {job.reason}"
        unrunnable = object.__new__(cls)
        unrunnable.__dict__.update(job.__dict__, payload={}, reason=reason)
        return unrunnable


def undecodable(exc: BaseException) -> str:
    """Why JSON text from PostgreSQL could not be decoded in Python."""
    if isinstance(exc, RecursionError):
        return f"it is nested too deep for Python's JSON decoder ({exc})"
    return str(exc)


_FIELD_NAMES = tuple(f.name for f in fields(Job))
_OPTIONAL_FIELDS = {f.name: f.default for f in fields(Job) if f.default is not MISSING}
_STATUSES = {status.value: status for status in JobStatus}


class Claim(NamedTuple):
    """Ownership of a running job: every state change names it, so a stale owner changes nothing.
    (A named tuple: a worker makes one per finished job, in half the time of a frozen dataclass.)

    The claim's time makes it unique: a worker and attempt number alone can repeat (a claim
    the server forgot in a crash, its attempt with it; a job given back unstarted, its attempt
    unspent), and then an old outcome would count for the new claim."""

    job_id: int
    attempt: int
    worker: str
    claimed_at: datetime


@dataclass(frozen=True)
class Enqueued:
    """The result of an enqueue: the job's id, and whether an unfinished job with the same
    idempotency key already existed (then no new job was made)."""

    id: int
    deduplicated: bool = False
