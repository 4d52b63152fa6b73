"""One call handed to a worker's task threads, and what became of it
(:mod:`skiplock._runtime.task_threads`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

R = TypeVar("R")

# The states of a call: queued for a thread, running in one, returned (or raised), and dropped
# (its waiter was cancelled before a thread took it: it never runs).
QUEUED, RUNNING, RETURNED, DROPPED = range(4)


class ThreadCall:
    """One call handed to the task threads, and what became of it."""

    __slots__ = ("began", "error", "fn", "future", "kept", "returned", "state", "value", "waiter")

    def __init__(self, fn: Callable[[], Any], waiter: asyncio.Future[Any] | None = None) -> None:
        self.fn = fn
        self.state = QUEUED
        self.value: Any = None
        self.error: BaseException | None = None
        self.waiter = waiter  # the event loop's (see TaskThreads.start)
        self.future: Future[Any] | None = None  # a thread's (see TaskThreads.submit)
        self.kept = False
        self.returned = False  # set (without the lock) as soon as it has
        self.began: float | None = None  # time.monotonic() when a thread took it

    def run(self) -> None:
        """In a task thread: call it, keeping what it returned or raised."""
        try:
            self.value = self.fn()
        except BaseException as exc:  # the task's own SystemExit too: its job's outcome
            self.error = exc
        self.returned = True

    def settle_future(self) -> None:
        """In its thread: the outcome of a call made with ``submit`` to its future."""
        assert self.future is not None
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.value)


class CallFuture(Future[R]):
    """The future :meth:`TaskThreads.submit` returns: the call's outcome, and the call."""

    def __init__(self, call: ThreadCall) -> None:
        super().__init__()
        self.call = call
