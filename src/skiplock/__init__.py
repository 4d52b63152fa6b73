"""skiplock: a PostgreSQL job queue built on ``FOR UPDATE SKIP LOCKED``."""

from __future__ import annotations

from skiplock._version import __version__ as __version__
from skiplock.app import App
from skiplock.bulk import CancelledJobs, RetriedJobs
from skiplock.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    Fail,
    IdempotencyConflict,
    InvalidArguments,
    InvalidName,
    InvalidPayload,
    JobTimeout,
    Retry,
    SchemaNotMigrated,
    SkiplockError,
    UnknownTask,
)
from skiplock.events import JobEvent
from skiplock.job import Claim, Enqueued, Job, JobStatus
from skiplock.retry import ExponentialBackoff, FixedDelay, RetryPolicy
from skiplock.task import JobContext, Task
from skiplock.worker import Worker, WorkerStats

__all__ = [
    "App",
    "CancelledJobs",
    "Claim",
    "ConfigurationError",
    "DatabaseUnavailable",
    "Enqueued",
    "ExponentialBackoff",
    "Fail",
    "FixedDelay",
    "IdempotencyConflict",
    "InvalidArguments",
    "InvalidName",
    "InvalidPayload",
    "Job",
    "JobContext",
    "JobEvent",
    "JobStatus",
    "JobTimeout",
    "RetriedJobs",
    "Retry",
    "RetryPolicy",
    "SchemaNotMigrated",
    "SkiplockError",
    "Task",
    "UnknownTask",
    "Worker",
    "WorkerStats",
]
