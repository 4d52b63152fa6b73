"""skiplock: a PostgreSQL job queue built on ``FOR UPDATE SKIP LOCKED``."""

from __future__ import annotations

from .app import App
from .errors import (
    ConfigurationError,
    DatabaseUnavailable,
    InvalidName,
    InvalidPayload,
    Retry,
    SchemaNotMigrated,
    SkiplockError,
    UnknownTask,
)
from .job import Claim, Enqueued, Job, JobStatus
from .retry import ExponentialBackoff, FixedDelay, RetryPolicy
from .task import JobContext, Task
from .worker import Worker, WorkerStats

__all__ = [
    "App",
    "Claim",
    "ConfigurationError",
    "DatabaseUnavailable",
    "Enqueued",
    "ExponentialBackoff",
    "FixedDelay",
    "InvalidName",
    "InvalidPayload",
    "Job",
    "JobContext",
    "JobStatus",
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
