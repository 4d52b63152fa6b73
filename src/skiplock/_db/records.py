"""The small records the store's statements take and give instead of positional tuples: frozen,
pure, no I/O (kept apart from the store, whose sync twin is generated, so that they exist
once)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from skiplock._db.queue_locks import QUEUE_LOCK_WAIT
from skiplock.job import Claim

# Limited keys a claim of limited keys looks at, at most (the next claim goes on after the last
# of them).
KEYS_PER_CLAIM = 16


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's cluster-wide limits, as its settings say: at most ``concurrency`` jobs running
    (None: no such limit), and whether a rate limit caps its starts."""

    concurrency: int | None = None
    rated: bool = False


@dataclass(frozen=True, slots=True)
class QueueSetting:
    """A queue's row of settings (see ``queue_settings`` in runtime.sql)."""

    paused: bool
    limits: QueueLimits

    @property
    def limited(self) -> bool:
        """Whether its claims go through the serialised, limited claim."""
        return self.limits.concurrency is not None or self.limits.rated


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    """A claim from one queue with a cluster-wide limit: up to ``want`` jobs (a held-lock claim
    takes one) for ``worker`` under a lease of ``lease_seconds``, waiting at most ``lock_wait``
    seconds for the queue's claim lock.  With ``keys_limited`` (some key has limits; leased
    claims only), the queue's jobs of limited keys are claimed too, within their keys' limits,
    from the limited keys after ``after_key``."""

    queue: str
    limits: QueueLimits
    worker: str
    lease_seconds: float
    want: int = 1
    lock_wait: float = QUEUE_LOCK_WAIT
    keys_limited: bool = False
    after_key: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimRoom:
    """How many jobs a limited queue lets start now (``room``, which may be 0 or less), and the
    rate budget to spend from (None: the queue has no rate limit)."""

    room: int
    budget: float | None


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """A claimed job's failed attempt, for ``job_fail_many``: its ``error`` and when it is tried
    again, in ``retry_in`` seconds (None: the failure is final)."""

    claim: Claim
    error: str
    retry_in: float | None


@dataclass(frozen=True, slots=True)
class Snooze:
    """A claimed job put back without spending an attempt, due in ``delay`` seconds, for
    ``job_snooze_many``."""

    claim: Claim
    delay: float


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What a claimed job's task returned, as JSON text, stored with its completion
    (``job_complete_with_results_many``, ``job_record_results``)."""

    claim: Claim
    result: str


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """What a running job reported with ``ctx.progress``, to be written by its worker: the
    claim (leased jobs) or the held-lock session's backend pid (held-lock jobs), a fraction in
    0..1 and a short status."""

    claim: Claim
    progress: float
    status: str | None
    held_pid: int | None = None


@dataclass(frozen=True, slots=True)
class ShownProgress:
    """A job's last reported progress (job_progress_get)."""

    progress: float
    status: str | None
    attempt: int
    worker: str
    updated_at: datetime
