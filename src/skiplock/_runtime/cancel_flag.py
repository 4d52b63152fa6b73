"""A job's cancellation flag (``ctx.cancelled``), made cheaply for every job that takes its
context."""

from __future__ import annotations

import threading


class CancelFlag(threading.Event):
    """A ``threading.Event`` whose condition (a lock and its waiters) is made the first time a
    thread waits on it, sets or clears it: most jobs' flags are only read, or not at all, and
    an Event's condition costs more to make than the rest of a job's context."""

    def __init__(self) -> None:  # Event.__init__ would make the condition now
        self._flag = False

    @property
    def _cond(self) -> threading.Condition:  # read by every method of Event but is_set
        made: threading.Condition | None = self.__dict__.get("_made_cond")
        if made is None:
            # Two threads may make one each at once: setdefault keeps the first for both.
            made = self.__dict__.setdefault("_made_cond", threading.Condition(threading.Lock()))
        return made
