"""The contract of a skiplock backend: what stores jobs and hands them to workers.

A backend is the narrow seam between skiplock's faces (``App``, ``Task``, ``Worker``) and
where the jobs live.  PostgreSQL (:class:`skiplock.backends.postgres.PostgresBackend`) is the
first; the protocol is written so that a second one, a broker fed from a transactional outbox,
can implement it without PostgreSQL's tricks.  Every method's docstring is the contract, and
``tests/conformance/`` checks it against every backend (docs/backends.md lists each semantic
with its test).

The vocabulary:

- A job is a :class:`~skiplock.job.Job` record; a new one is a :class:`NewJob`, already
  validated (names, bounds, payload size) and with its payload and meta as JSON text.
- A claim is a :class:`~skiplock.job.Claim`: (job id, attempt, worker, claimed_at), unique to
  one claim of one job.  Every write about a running job names its claim, and a backend must
  change nothing for a claim that no longer owns its job (the lease expired and the job was
  reclaimed, released, or claimed again).  Each such method returns the job ids whose claims
  still owned their jobs: the writes that took effect.
- Times are timezone-aware datetimes.  The methods that compare with the time take ``now``
  (None: the backend's own clock); tests pin it at the boundaries.
- A transaction is opaque: whatever the backend accepts as the caller's transaction (for
  PostgreSQL, a psycopg ``AsyncConnection`` or the objects ``App.enqueue(conn=...)`` takes).

``App`` holds one (``App(backend=...)``; by default a PostgresBackend on the app's database):
its async enqueues, and a leasing worker's claims, heartbeats, outcomes and reclaims, go
through it; the worker claims through the backend's claimer (an optional capability:
:mod:`skiplock.backends.claimer`), or its :meth:`Backend.claim` when it offers none.  Not
in the contract (PostgreSQL-only, reached on the app's database as before): held-lock jobs,
queue settings (pause, cluster-wide limits), LISTEN/NOTIFY wake-ups, worker presence,
leadership, periodic ticks and dependencies' release (docs/backends.md, "Beyond the
contract").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from skiplock._db.enqueue import NewJob as NewJob
from skiplock._db.enqueue import NewJobs as NewJobs
from skiplock._db.records import FailedAttempt as FailedAttempt
from skiplock._db.records import Snooze as Snooze
from skiplock._db.records import TaskResult as TaskResult
from skiplock.job import Claim, Enqueued, Job, JobStatus

Transaction: TypeAlias = Any
"""The caller's transaction, opaque to skiplock: what a backend's ``enqueue`` accepts."""

Completion = Literal["keep", "delete", "archive"]
"""What becomes of a completed job: kept ``done``, deleted, or moved to an archive (kept
``done``, out of the way of the claims)."""

CancelOutcome = Literal["cancelled", "requested", "unchanged"]
"""What :meth:`Backend.cancel` did."""


@runtime_checkable
class Backend(Protocol):
    """Where jobs live, and the operations skiplock's app and workers need of it.

    Every method is a coroutine and safe to call concurrently from several tasks and from
    several processes (workers on other machines): the guarantees below hold across all of
    them.  Delivery is at least once: a job whose claim is lost (its lease expired) runs again.
    """

    # -- enqueue -------------------------------------------------------------------------

    async def enqueue(
        self, jobs: Sequence[NewJob] | NewJobs, *, transaction: Transaction | None = None
    ) -> list[Enqueued]:
        """Store new jobs; one :class:`~skiplock.job.Enqueued` per job, in order.

        - ``jobs`` is a sequence of :class:`NewJob`, or the jobs of one enqueue call as a
          :class:`NewJobs` (every column shared but the payload: what ``App`` and ``Task`` pass;
          ``jobs.one_by_one()`` gives them as :class:`NewJob` rows for a backend without a
          batch form).

        - A job is ``pending`` (claimable at once) when it has neither ``run_at`` nor ``delay``
          in the future, else ``scheduled`` until then.  Its ``attempts`` start at 0.
        - An ``idempotency_key`` held by an unfinished job (not done, failed or cancelled)
          makes no new job: the result is that job's id with ``deduplicated=True``.  Jobs of
          the same call sharing a key are one job (the first made, the others deduplicated).
          Once the holder is finished, the key is free again.
        - ``transaction``: the caller's; the jobs exist for others (claims, reads) only once it
          commits, and never if it rolls back.  Without it, they are committed on return.
        """
        ...

    # -- claim and leases ----------------------------------------------------------------

    async def claim(
        self, queues: Sequence[str], limit: int, worker: str, lease_seconds: float
    ) -> list[Job]:
        """Claim up to ``limit`` claimable jobs of ``queues`` for ``worker``.

        - Claimable: ``pending``, not past its ``expires_at``, and no other job with the same
          ``entity_key`` is ``running`` (at most one job per entity key runs at a time, across
          every worker; a claim takes at most one job per key).
        - Order: in each queue, lowest ``priority`` first, then earliest ``run_at``, then
          lowest id; across ``queues``, turns: each queue's first job, in the order of
          ``queues``, then each queue's second, and so on.  The jobs come back in that order.
        - Jobs with a ``fair_key`` take turns with the other keys' jobs of their queue and
          priority (the PostgreSQL backend gives each its turn as its ``run_at`` at enqueue).
        - Jobs whose ``limit_key`` has limits (:meth:`set_key_limit`) are claimed within them,
          exactly across claims and workers; other jobs are not held back by them.
        - A claimed job is ``running``, its ``attempts`` one more than before,
          ``locked_by=worker``, ``locked_at`` the claim's time and ``locked_until`` the claim's
          time plus ``lease_seconds``; ``job.claim`` is its ownership.
        - Exclusive: no job is handed to two claims, however many run at once.
        - Returns at once (no waiting for work): an empty list when nothing is claimable.
        """
        ...

    async def extend(
        self, claims: Sequence[Claim], lease_seconds: float, *, now: datetime | None = None
    ) -> dict[int, bool]:
        """The heartbeat: set the lease of every claim that still owns its job to ``now`` plus
        ``lease_seconds``; returns those jobs' ids, each with whether cancelling it was asked
        (:meth:`cancel` of a running job).  A stale claim is left out and changes nothing."""
        ...

    async def reclaim_expired(self, *, now: datetime | None = None) -> dict[int, JobStatus]:
        """Take back every ``running`` job whose lease ended before ``now`` (a lease still
        holds at its last instant, ``locked_until`` itself): ``pending`` again with its attempt
        spent, or ``failed`` when that was its last attempt.  Its claim owns it no more.
        Returns id -> new status."""
        ...

    # -- finish (each only for claims that still own their jobs) ---------------------------

    async def complete(
        self, done: Sequence[Claim | TaskResult], *, completion: Completion = "keep"
    ) -> set[int]:
        """The jobs ran to success: ``done`` (with ``finished_at``, and the task's result when
        given as a :class:`TaskResult`, readable as ``job.result``), or gone (``"delete"``),
        or archived (``"archive"``: done, still readable by :meth:`get_job`).  All or none of
        them are written.  Returns the ids still owned."""
        ...

    async def fail(self, failures: Sequence[FailedAttempt]) -> dict[int, JobStatus]:
        """The attempts failed, with ``error`` as the job's ``last_error``.  Retried when
        ``retry_in`` is not None and an attempt is left (``attempts < max_attempts``):
        ``scheduled`` to run ``retry_in`` seconds from now, or ``pending`` at once for 0.
        Otherwise ``failed`` (final, with ``finished_at``).  Returns id -> new status, for the
        claims still owning their jobs."""
        ...

    async def snooze(self, snoozes: Sequence[Snooze]) -> set[int]:
        """Put the jobs back to run ``delay`` seconds from now (``scheduled``; ``pending`` for
        0) without spending an attempt: the attempts left (``max_attempts - attempts``) stay
        what they were before the claim.  Returns the ids still owned."""
        ...

    async def cancel_claimed(self, claims: Sequence[Claim]) -> set[int]:
        """The running jobs were cancelled (their worker stopped them, usually because
        :meth:`cancel` asked): ``cancelled``, final.  Returns the ids still owned."""
        ...

    async def release(self, claims: Sequence[Claim]) -> set[int]:
        """Give back claimed jobs that never started (a worker stopping): ``pending`` at once,
        their attempt unspent (``attempts`` as before the claim).  Returns the ids still
        owned."""
        ...

    # -- upkeep --------------------------------------------------------------------------

    async def promote_due(self, *, now: datetime | None = None) -> dict[str, int]:
        """Make every ``scheduled`` job whose ``run_at`` is ``now`` or earlier ``pending``;
        returns how many per queue.  A backend whose claims see due scheduled jobs by
        themselves may do nothing here and return ``{}``, but a job must become claimable
        once this has run with a ``now`` past its ``run_at``."""
        ...

    # -- administration ------------------------------------------------------------------

    async def set_key_limit(
        self,
        key: str,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        period: float = 1.0,
    ) -> None:
        """Limits of one ``limit_key`` value, over all its jobs whatever their task and queue:
        at most ``concurrency`` of them ``running`` at once, at most ``rate`` claims (starts)
        per ``period`` seconds, a bucket that starts full (None: no limit of that kind; both
        None: the key has none, and its jobs are claimable as any).  Replaces the key's limits;
        :meth:`claim` honours them from its next call on."""
        ...

    async def cancel(self, job_id: int) -> CancelOutcome:
        """Cancel a job: one that has not started (``waiting``, ``scheduled``, ``pending``)
        becomes ``cancelled`` and is never claimed (``"cancelled"``); for a ``running`` one,
        its worker is asked, through :meth:`extend`'s answer, to stop it (``"requested"``);
        a finished or unknown job is left as it is (``"unchanged"``)."""
        ...

    async def get_job(self, job_id: int) -> Job | None:
        """The job as it is now (archived jobs included); None when there is none."""
        ...

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: JobStatus | None = None,
        task: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[Job]:
        """Up to ``limit`` jobs matching every filter given, newest (highest id) first; with
        ``before``, only ids below it (the next page)."""
        ...

    async def close(self) -> None:
        """Let go of every resource (connections); the backend is not used after."""
        ...
