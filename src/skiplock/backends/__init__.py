"""Backends: where jobs live.  :class:`Backend` is the contract (see
:mod:`skiplock.backends.base` and docs/backends.md); :class:`PostgresBackend` its first
implementation."""

from __future__ import annotations

from skiplock.backends.base import (
    Backend,
    CancelOutcome,
    Completion,
    FailedAttempt,
    NewJob,
    NewJobs,
    Snooze,
    TaskResult,
    Transaction,
)
from skiplock.backends.claimer import Claimer, ClaimerSettings, PlainClaimer, claimer_of
from skiplock.backends.postgres import PostgresBackend

__all__ = [
    "Backend",
    "CancelOutcome",
    "Claimer",
    "ClaimerSettings",
    "Completion",
    "FailedAttempt",
    "NewJob",
    "NewJobs",
    "PlainClaimer",
    "PostgresBackend",
    "Snooze",
    "TaskResult",
    "Transaction",
    "claimer_of",
]
