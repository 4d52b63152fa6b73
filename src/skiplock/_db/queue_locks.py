"""The claim lock of a limited queue (its row in the ``queues`` table, see
``queue_lock_for_claim`` in runtime.sql) and what a worker does while a session holds it: the
claim of that queue waits a bounded time, then that queue is passed over for the round and the
worker claims from its others.  Each episode is logged once, when it starts and when it ends.
"""

from __future__ import annotations

import logging

from skiplock.errors import QueueLockBusy

log = logging.getLogger("skiplock.worker")

# The longest a claim waits for a limited queue's claim lock; other claims hold it for
# milliseconds.  While an episode lasts, the wait is short, so that the worker's other queues
# are hardly delayed by a lock that is not let go.
QUEUE_LOCK_WAIT = 1.0
QUEUE_LOCK_WAIT_BUSY = 0.01


def lock_timeout_setting(seconds: float) -> str:
    """``seconds`` as a value of PostgreSQL's lock_timeout setting (whole milliseconds, >= 1)."""
    return f"{max(1, round(seconds * 1000))}ms"


class QueueLockWaits:
    """Which limited queues' claim locks were busy at their last claim."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def wait_for(self, queue: str) -> float:
        """How long the next claim of ``queue`` may wait for its claim lock."""
        return QUEUE_LOCK_WAIT_BUSY if queue in self._busy else QUEUE_LOCK_WAIT

    def busy(self, error: QueueLockBusy) -> None:
        if error.queue not in self._busy:
            self._busy.add(error.queue)
            log.warning("%s; claiming from the other queues meanwhile", error)

    def free(self, queue: str) -> None:
        if queue in self._busy:
            self._busy.discard(queue)
            log.warning("queue %r: its claim lock is free again, claims resumed", queue)
