"""skiplock: a PostgreSQL job queue built on ``FOR UPDATE SKIP LOCKED``."""

from __future__ import annotations

from .app import App
from .bulk import CancelledJobs, RetriedJobs
from .errors import (
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
from .events import JobEvent
from .job import Claim, Enqueued, Job, JobStatus
from .retry import ExponentialBackoff, FixedDelay, RetryPolicy
from .task import JobContext, Task
from .worker import Worker, WorkerStats

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
__version__ = "0.1.0"
