"""The threads a worker's sync tasks run in.

A worker runs each sync task in one of ``concurrency`` long-lived threads that take calls from
one queue.  How a call gets a thread and its outcome gets back to the event loop in batches is
told in docs/design.md, "Sync tasks in batches"; the parts live beside this module: the calls
(:mod:`~skiplock._runtime.thread_calls`), the outcomes' way back
(:mod:`~skiplock._runtime.thread_outcomes`), the loop's watch over the queue
(:mod:`~skiplock._runtime.queue_watch`) and Django's connection upkeep around each task
(:mod:`~skiplock._runtime.django_requests`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable
from time import monotonic
from typing import Any, ParamSpec, TypeVar

from skiplock._runtime.django_requests import as_request_if_django, django_is_set_up
from skiplock._runtime.queue_watch import QueueWatch
from skiplock._runtime.thread_calls import (
    DROPPED,
    QUEUED,
    RETURNED,
    RUNNING,
    CallFuture,
    ThreadCall,
)
from skiplock._runtime.thread_outcomes import LoopOutcomes

__all__ = ["CallFuture", "TaskThreads", "ThreadCall", "django_is_set_up"]

log = logging.getLogger("skiplock.worker")

P = ParamSpec("P")
R = TypeVar("R")

# Calls that take less than this (on a moving average) are quick: a thread running one will
# soon take the next queued call, so no sleeping thread is woken for it (see QueueWatch).
QUICK_CALL = 0.0001
# Calls shorter than this (on the same average) are short: a slot queues its next job's call
# behind the one it waits for, so that the thread returning from that one takes it at once
# instead of waiting for the event loop to hand it over (see LeasedSlots).
SHORT_CALL = 0.02


class TaskThreads:
    """The threads of a worker's sync tasks: one per slot, and one in place of each thread a
    stopped task keeps (see ``keep``).  A task started while Django is set up in this process
    runs between two ``close_old_connections()`` in its thread, as a request does.

    A thread that returns takes the next queued call without sleeping, and a sleeping thread
    is woken only when no other is on its way to the queue.  Outcomes go back to the event
    loop in batches (:class:`LoopOutcomes`)."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.kept: int = 0  # calls the worker stopped waiting for, still running in their thread
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque[ThreadCall] = deque()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads asleep, waiting for a call
        self._searching = 0  # threads woken or started that have not taken a call yet
        self._running = 0  # threads in a call that was not kept
        self._call_time = 0.0  # moving average of how long calls take, in seconds
        self._shutdown = False
        self._outcomes = LoopOutcomes()
        self._watch = QueueWatch(
            self._queue, self._lock, self._outcomes, self._hand_on_now, lambda: self._shutdown
        )
        _ALL.add(self)

    # -- handing calls over -------------------------------------------------------------------

    def start(self, fn: Callable[[], Any]) -> ThreadCall:
        """Queue ``fn`` for a thread; its outcome comes to ``call.waiter``, a future of the
        running event loop, with the other outcomes of the same batch."""
        loop = asyncio.get_running_loop()
        if self._outcomes.loop is not loop:
            self._outcomes.loop = loop
            self._watch.bind(threading.get_ident())
        call = ThreadCall(as_request_if_django(fn), loop.create_future())
        self._put(call, force=False)
        return call

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> CallFuture[R]:
        """Queue ``fn(*args, **kwargs)`` for a thread; a concurrent future for its outcome."""
        call = ThreadCall(as_request_if_django(functools.partial(fn, *args, **kwargs)))
        future: CallFuture[R] = CallFuture(call)
        call.future = future
        future.set_running_or_notify_cancel()
        self._put(call, force=True)  # from any thread: no loop watches for it
        return future

    def short(self) -> bool:
        """Whether calls are short (see ``SHORT_CALL``): a slot may then queue its next job's
        call behind the one it waits for (see LeasedSlots)."""
        return self._call_time < SHORT_CALL

    def _put(self, call: ThreadCall, force: bool) -> None:
        if self._shutdown:
            raise RuntimeError("the task threads are shut down")
        # The queue's append and the reads below are atomic: no lock unless a thread is to be
        # woken.  A thread about to sleep counts itself idle before it looks at the queue a
        # last time, so either it sees this call or this sees it idle.
        self._queue.append(call)
        if self._searching or (
            not force and self._running and self._call_time < QUICK_CALL and self._watch.on
        ):
            return
        with self._lock:
            if self._queue:
                self._hand_on(force)

    def _hand_on_now(self) -> None:
        self._hand_on(force=True)

    def _hand_on(self, force: bool = False) -> None:
        """With the lock held and calls queued: get a thread on its way to them, unless one
        is: a woken one, or (``force`` aside) one running a call while calls are quick, which
        will take the next when it returns (the watch makes sure it does not take too long)."""
        if self._searching:
            return
        if (
            self._running
            and self._call_time < QUICK_CALL
            and not force
            and self._outcomes.loop is not None
        ):
            self._watch.start()
            return
        if self._idle:
            self._searching += 1
            self._wake.notify()
        elif len(self._threads) < self._limit():
            self._searching += 1
            thread = threading.Thread(
                target=self._serve, name=f"skiplock-task_{len(self._threads)}"
            )
            self._threads.append(thread)
            thread.start()

    def _limit(self) -> int:
        return self.concurrency + min(self.kept, self.concurrency)

    # -- the threads --------------------------------------------------------------------------

    def _serve(self) -> None:
        lock = self._lock
        queue = self._queue
        outcomes = self._outcomes
        watch = self._watch

        def watched() -> bool:
            return watch.on

        searching = True
        done: ThreadCall | None = None
        while True:
            with lock:
                if done is not None:
                    done.state = RETURNED
                    if done.kept:
                        self.kept -= 1
                    else:
                        self._running -= 1
                    done = None
                call = None
                while call is None:
                    if not queue and not self._shutdown:
                        if searching:
                            self._searching -= 1
                            searching = False
                        self._idle += 1  # before the last look (see _put)
                        if not queue:
                            if outcomes.returned and not outcomes.due:
                                outcomes.wake()  # an outcome this thread held back
                            self._wake.wait()
                            searching = True  # the one who woke this thread counted it
                        self._idle -= 1
                        continue
                    if not queue:  # shut down, nothing queued
                        if searching:
                            self._searching -= 1
                        return
                    call = queue.popleft()
                    if call.state == DROPPED:
                        call = None
                if searching:
                    self._searching -= 1
                    searching = False
                call.state = RUNNING
                self._running += 1
                if queue:
                    self._hand_on()
            call.began = began = monotonic()
            call.run()
            self._call_time += (monotonic() - began - self._call_time) * 0.125
            if call.future is not None:
                call.settle_future()
            elif queue and self._call_time < QUICK_CALL and watch.on:
                # Quick calls with more queued: this thread takes the next at once, and hands
                # this outcome back with that one's (or the watch takes it, if that one is slow).
                outcomes.hold_back(call, watched)
            else:
                outcomes.hand_back(call)
            done = call
            del call

    def drop(self, call: ThreadCall) -> bool:
        """Drop ``call`` if no thread has taken it (it never runs); whether it was dropped."""
        with self._lock:
            if call.state == QUEUED:
                call.state = DROPPED
            return call.state == DROPPED

    # -- calls the worker stopped waiting for -------------------------------------------------

    def keep(self, call: ThreadCall | CallFuture[Any], job_id: int) -> None:
        """The worker stopped waiting for ``call`` (its job timed out, or was cancelled or
        lost): one still queued never runs; one that runs goes on, as a sync task cannot be
        interrupted and this one did not return when told (``ctx.cancelled``).  Its thread
        serves no other job until it returns, so another thread takes its place, up to
        ``concurrency`` such threads at a time: the worker's next sync jobs do not wait behind
        it.  Past that, they do (and a warning says so)."""
        if isinstance(call, CallFuture):
            call = call.call
        with self._lock:
            if call.state == QUEUED:
                call.state = DROPPED
                return
            if call.state != RUNNING or call.kept or call.returned:
                return
            call.kept = True
            self.kept += 1
            self._running -= 1
            kept = self.kept
            if self._queue:
                self._hand_on(force=True)
        log.warning(
            "job %s: its sync task did not return when stopped; it keeps its thread until it "
            "does (%d kept)%s",
            job_id,
            kept,
            "" if kept <= self.concurrency else "; no thread takes its place: sync jobs wait",
        )

    # -- the end ------------------------------------------------------------------------------

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more calls; the threads end once the queue is empty (``cancel_futures``: the
        queued calls are dropped).  ``wait``: until they have, calls that run included."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._queue:
                    call = self._queue.popleft()
                    call.state = DROPPED
                    if call.future is not None:
                        call.future.cancel()
            self._wake.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()

    def __enter__(self) -> TaskThreads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=True)


# Every TaskThreads of the process: told at interpreter exit to let their idle threads end (as
# ThreadPoolExecutor does), so that exit waits only for calls that still run.
_ALL: weakref.WeakSet[TaskThreads] = weakref.WeakSet()


def _at_exit() -> None:
    for threads in list(_ALL):
        threads.shutdown(wait=False)


threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
