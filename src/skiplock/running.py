"""A job a worker is running, and how to stop it."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Literal

from .job import Job
from .task import WorkerModel

log = logging.getLogger("skiplock.worker")

# cancelled: an admin asked; shutdown: the grace period is over; lost: the job's lease was found
# reclaimed (by a heartbeat, or by a new claim of the job here), so it runs (or will run)
# elsewhere and this run's outcome cannot count.
StopReason = Literal["cancelled", "shutdown", "lost"]


class RunningJob:
    """A claimed job in one of the worker's slots: its task, and why it is being stopped."""

    def __init__(self, job: Job, model: WorkerModel) -> None:
        self.job = job
        self.model = model
        self.started = time.monotonic()
        self.task: asyncio.Task[None] | None = None
        self.stop_reason: StopReason | None = None
        # Leased jobs: until when (monotonic) the lease is known to hold: the claim's or the
        # last heartbeat's send time plus the lease; -inf once found reclaimed (lease_lost).
        self.lease_until = math.inf
        self._cancel_flag: threading.Event | None = None

    @property
    def cancel_flag(self) -> threading.Event:
        """Set when the job is stopped (see ``stop``) or times out: sync tasks cannot be
        interrupted, so they get this flag (ctx.cancelled) to check.  Made on first use (most
        jobs never need it)."""
        if self._cancel_flag is None:
            self._cancel_flag = threading.Event()
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

    @property
    def claim_gone(self) -> bool:
        """A heartbeat, or a new claim of the job by this worker, found this claim reclaimed:
        no write of it could count."""
        return self.lease_until == -math.inf

    def lease_lost(self) -> None:
        """The job's lease was reclaimed (it expired, or the server forgot the claim): the job
        is pending again or runs elsewhere, and nothing this run does can be recorded.  A
        started job is stopped as a cancelled one is (an async task where it awaits; a sync
        task sees ``ctx.cancelled``), so that it does not go on next to its new run; a reserved
        one is given back when its turn comes (see LeasedSlots._next_reserved)."""
        if self.claim_gone:
            return  # told already (a later heartbeat, while the stopped job winds down)
        self.lease_until = -math.inf
        stopping = self.task is not None and self.stop_reason is None
        log.warning(
            "job %s attempt %s: lease lost (reclaimed); its outcome will not count%s",
            self.job.id,
            self.job.attempts,
            "; stopping it" if stopping else "",
        )
        if stopping:
            self.stop("lost")
