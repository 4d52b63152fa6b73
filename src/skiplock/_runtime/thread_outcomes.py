"""Outcomes of sync calls back to the event loop, in batches: one wake-up of the loop delivers
every outcome that came in since the last one (see docs/design.md, "Sync tasks in batches")."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from skiplock._runtime.thread_calls import ThreadCall


class LoopOutcomes:
    """Outcomes on their way from the task threads to the event loop's waiters."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.returned: deque[ThreadCall] = deque()  # outcomes the loop has not been given yet
        self.due = False  # a wake-up of the loop is on its way for them

    def hand_back(self, call: ThreadCall) -> None:
        """From a thread: ``call`` returned; to the loop with the others that returned since
        its last wake-up.  The appends are atomic; the loop clears the flag before it takes
        the outcomes (see ``deliver``), so an outcome it does not take finds the flag clear
        and wakes it again."""
        self.returned.append(call)
        if not self.due:
            self.wake()

    def hold_back(self, call: ThreadCall, watched: Callable[[], bool]) -> None:
        """From a thread that takes the next queued call at once: ``call``'s outcome waits to
        go back with that one's, or for the loop's next look at the queue (see
        ``QueueWatch``).  Appended before ``watched`` is read: a watch that stopped after
        the append is woken here."""
        self.returned.append(call)
        if not watched() and not self.due:
            self.wake()

    def wake(self) -> None:
        """Wake the loop to deliver what has returned (at most one wake-up on its way)."""
        self.due = True
        self.in_loop(self.deliver)

    def in_loop(self, callback: Callable[[], None]) -> None:
        loop = self.loop
        if loop is not None:
            # A closed loop raises RuntimeError: nobody waits for outcomes any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback)

    def deliver(self) -> None:
        """In the event loop: hand it every outcome returned since the last delivery."""
        self.due = False
        returned = self.returned
        while returned:
            call = returned.popleft()
            waiter = call.waiter
            if waiter is None or waiter.done():  # cancelled: the job was stopped
                continue
            if call.error is not None:
                waiter.set_exception(call.error)
            else:
                waiter.set_result(call.value)
