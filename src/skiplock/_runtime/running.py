"""A job a worker is running, and how to stop it."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from psycopg import AsyncConnection

from skiplock._runtime.cancel_flag import CancelFlag
from skiplock._runtime.progress import ProgressSlot
from skiplock._runtime.thread_calls import ThreadCall
from skiplock._task_settings import WorkerModel
from skiplock.job import Job

log = logging.getLogger("skiplock.worker")

# cancelled: an admin asked; shutdown: the grace period is over; lost: the job's claim is gone
# (a heartbeat or a new claim of the job here found its lease reclaimed; a held-lock job's
# session ended), so it runs (or will run) elsewhere and this run's outcome cannot count.
StopReason = Literal["cancelled", "shutdown", "lost"]


class RunningJob:
    """A claimed job in one of the worker's slots: its task, and why it is being stopped."""

    def __init__(self, job: Job, model: WorkerModel) -> None:
        self.job = job
        self.model = model
        self.started: float = time.monotonic()
        self.task: asyncio.Task[None] | None = None
        self.stop_reason: StopReason | None = None
        # Leased jobs: until when (monotonic) the lease is known to hold: the claim's or the
        # last heartbeat's send time plus the lease.  Any job: -inf once its claim is known
        # gone (lease_lost, session_ended).
        self.lease_until: float = math.inf
        self.conn: AsyncConnection[Any] | None = None  # a held-lock job's, in its transaction
        self._cancel_flag: threading.Event | None = None
        self._progress_slot: ProgressSlot | None = None
        # A sync job queued by its slot behind the slot's current one (see LeasedSlots): its
        # call, and the timer that keeps its timeout until the slot waits for it.
        self.ahead: ThreadCall | None = None
        self.ahead_drop: Callable[[ThreadCall], object] | None = None  # TaskThreads.drop
        self.ahead_timer: asyncio.TimerHandle | None = None

    @property
    def progress_slot(self) -> ProgressSlot:
        """Where the task's ctx.progress puts its reports for the ProgressWriter.  Made on
        first use (most jobs never report)."""
        if self._progress_slot is None:
            self._progress_slot = ProgressSlot()
        return self._progress_slot

    @property
    def progress_slot_if_made(self) -> ProgressSlot | None:
        return self._progress_slot

    @property
    def cancel_flag(self) -> threading.Event:
        """Set when the job is stopped (see ``stop``) or times out: sync tasks cannot be
        interrupted, so they get this flag (ctx.cancelled) to check.  Made on first use (most
        jobs never need it), its condition too (see CancelFlag)."""
        if self._cancel_flag is None:
            self._cancel_flag = CancelFlag()
            if self.stop_reason is not None:
                self._cancel_flag.set()
        return self._cancel_flag

    def stop(self, reason: StopReason) -> None:
        """Cancel the job's asyncio task (async tasks stop at their next await)."""
        self.stop_reason = self.stop_reason or reason
        if self._cancel_flag is not None:
            self._cancel_flag.set()
        if self.task is not None:
            self.task.cancel()
        elif self.ahead is not None and self.ahead_drop is not None:
            # Queued behind its slot's current job, which the slot waits for (not cancelled):
            # a call no thread has taken never runs, and the slot records the stop later.
            self.ahead_drop(self.ahead)

    def cancel_requested(self) -> None:
        """An admin asked to cancel the job (its heartbeat saw the flag, a NOTIFY came, or a
        held-lock job's recorded request was read): stop it, unless it is being stopped."""
        if self.stop_reason is not None:
            return
        log.info("job %s: cancellation requested, cancelling it", self.job.id)
        self.stop("cancelled")

    @property
    def claim_gone(self) -> bool:
        """A heartbeat, or a new claim of the job by this worker, found this claim reclaimed,
        or a held-lock job's session ended: no write of it could count."""
        return self.lease_until == -math.inf

    def lease_lost(self) -> None:
        """The job's lease was reclaimed (it expired, or the server forgot the claim): the job
        is pending again or runs elsewhere, and nothing this run does can be recorded.  A
        started job is stopped as a cancelled one is (an async task where it awaits; a sync
        task sees ``ctx.cancelled``), so that it does not go on next to its new run; a reserved
        one is given back when its turn comes (see LeasedSlots._next_reserved)."""
        self._lose("lease lost (reclaimed)")

    def session_ended(self) -> None:
        """A held-lock job's session ended (see held_sessions): its transaction rolled back
        with the claim, so the job is claimable again, maybe running elsewhere already, and
        its outcome cannot be written.  Stopped as a job whose lease was lost is."""
        self._lose("its held-lock session ended (the job is claimable again)")

    def _lose(self, what: str) -> None:
        if self.claim_gone:
            return  # told already (a later heartbeat, while the stopped job winds down)
        self.lease_until = -math.inf
        stopping = self.task is not None and self.stop_reason is None
        log.warning(
            "job %s attempt %s: %s; its outcome will not count%s",
            self.job.id,
            self.job.attempts,
            what,
            "; stopping it" if stopping else "",
        )
        if stopping:
            self.stop("lost")
