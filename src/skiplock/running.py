"""A job a worker is running, and how to stop it."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Literal

from .job import Job
from .task import WorkerModel

StopReason = Literal["cancelled", "shutdown"]


class RunningJob:
    """A claimed job in one of the worker's slots: its task, and why it is being stopped."""

    def __init__(self, job: Job, model: WorkerModel) -> None:
        self.job = job
        self.model = model
        self.started = time.monotonic()
        self.task: asyncio.Task[None] | None = None
        self.stop_reason: StopReason | None = None
        # Leased jobs: until when (monotonic) the lease is known to hold: the claim's or the
        # last heartbeat's send time plus the lease; -inf once a heartbeat found it reclaimed.
        self.lease_until = math.inf
        self._cancel_flag: threading.Event | None = None

    @property
    def cancel_flag(self) -> threading.Event:
        """Set when the job is cancelled or times out: sync tasks cannot be interrupted, so they
        get this flag (ctx.cancelled) to check.  Made on first use (most jobs never need it)."""
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
