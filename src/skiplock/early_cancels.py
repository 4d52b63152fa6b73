"""Cancel requests that reach a worker before the held-lock job they name runs there.

An admin's cancel of a job whose row another session has locked is sent by NOTIFY (see the
client's ``cancel_or_request``).  The row may be locked by a held-lock claim
whose worker has not started the job yet: it records the start apart first, one round trip
on another connection.  A request that arrives in that gap names a job not running there yet;
the worker keeps it for a while and applies it when the job starts, if the request came after
the claim (the claim is what held the row the admin found locked).  A request older than the
claim was about an earlier claim of the job, or about another worker's: it is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# How long a request waits for its job to start here, and how many wait at most.  The gap is
# one round trip; a request for a job that runs on another worker waits out the whole time.
KEPT_SECONDS = 30.0
KEPT_MAX = 1000


class EarlyCancels:
    """Cancel requests for jobs not running here (yet), by job id, with when they arrived."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._arrived: dict[int, float] = {}  # oldest first

    def __len__(self) -> int:
        return len(self._arrived)

    def add(self, job_id: int) -> None:
        """A request for a job that does not run here arrived now."""
        now = self._clock()
        self._arrived.pop(job_id, None)
        self._arrived[job_id] = now
        self._expire(now)

    def take(self, job_id: int, claimed_at: float) -> bool:
        """Whether a request for this job arrived since its claim (``claimed_at``, on the same
        clock) and no longer ago than ``KEPT_SECONDS``.  The request is forgotten either way."""
        arrived = self._arrived.pop(job_id, None)
        if arrived is None:
            return False
        return arrived >= claimed_at and self._clock() - arrived <= KEPT_SECONDS

    def _expire(self, now: float) -> None:
        while self._arrived:
            job_id, arrived = next(iter(self._arrived.items()))
            if now - arrived <= KEPT_SECONDS and len(self._arrived) <= KEPT_MAX:
                return
            del self._arrived[job_id]
