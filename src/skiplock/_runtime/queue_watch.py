"""The event loop's watch over the task threads' queue while calls are quick.

While calls are quick, no sleeping thread is woken for a queued call when one runs: that one
will take it when it returns.  In case it does not return soon (a call that turns out slow),
the loop looks at the queue every ``WATCH_INTERVAL`` (a timer, not a thread that polls: its
wake-ups would contend for the GIL) and gets a thread on its way to a call queued since its
last look; it also delivers the outcomes a thread held back (see docs/design.md, "Sync tasks
in batches")."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable

from skiplock._runtime.thread_calls import ThreadCall
from skiplock._runtime.thread_outcomes import LoopOutcomes

WATCH_INTERVAL = 0.001
WATCH_IDLE_ROUNDS = 200  # the watch stops after this many looks that found nothing queued


class QueueWatch:
    """Looks at ``queue`` from the event loop every WATCH_INTERVAL once started, until it has
    found nothing queued WATCH_IDLE_ROUNDS times in a row.  ``hand_on`` (called with ``lock``
    held) gets a thread on its way to the queued calls."""

    def __init__(
        self,
        queue: deque[ThreadCall],
        lock: threading.Lock,
        outcomes: LoopOutcomes,
        hand_on: Callable[[], None],
        stopped: Callable[[], bool],
    ) -> None:
        self.on = False  # read by the threads without the lock
        self._queue = queue
        self._lock = lock
        self._outcomes = outcomes
        self._hand_on = hand_on
        self._stopped = stopped
        self._loop_thread = 0
        self._head_seen: ThreadCall | None = None  # the first queued call at the last look
        self._empty_looks = 0
        self._timer: asyncio.TimerHandle | None = None

    def bind(self, loop_thread: int) -> None:
        self._loop_thread = loop_thread

    def start(self) -> None:
        """With the lock held: start looking (from the loop's thread or another)."""
        loop = self._outcomes.loop
        if self.on or loop is None:
            return
        self.on = True
        if threading.get_ident() == self._loop_thread:
            loop.call_soon(self._look)  # not here: the lock is held
        else:
            self._outcomes.in_loop(self._look)

    def _look(self) -> None:
        self._timer = None
        loop = self._outcomes.loop
        if self._stopped() or loop is None:
            self.on = False
            return
        queue = self._queue
        head = queue[0] if queue else None
        if head is not None and head is self._head_seen:
            with self._lock:
                if queue and queue[0] is head:
                    self._hand_on()
        self._head_seen = head
        outcomes = self._outcomes
        if outcomes.returned:
            outcomes.deliver()
        if head is None:
            self._empty_looks += 1
            if self._empty_looks >= WATCH_IDLE_ROUNDS:
                # Cleared before the last look at the held-back outcomes: a thread that holds
                # one back after this sees the flag clear and wakes the loop (see hold_back).
                self.on = False
                self._empty_looks = 0
                if outcomes.returned:
                    outcomes.deliver()
                return
        else:
            self._empty_looks = 0
        self._timer = loop.call_later(WATCH_INTERVAL, self._look)
