"""The threads sync tasks run in, and Django's connection upkeep around each task.

A worker runs each sync task in one of ``concurrency`` threads.  Django keeps a database
connection per thread and looks after it only between requests: its ``request_started`` and
``request_finished`` signals call ``close_old_connections()``, which closes a connection that
has seen an error and no longer works, or is older than ``CONN_MAX_AGE``.  A worker thread
serves no requests, so without that a connection the server dropped (a restart, a failover, a
pooler's idle timeout) stays in its thread and every later task there fails with "the
connection is closed" until the worker restarts: jobs end up ``failed`` for nothing.

So while the worker's process has Django set up (``django.setup()`` ran, as it must before a
task module imports models), each sync task runs the way a request does: old connections are
closed before and after it.  A connection that failed a task is replaced for the retry; with
``CONN_HEALTH_CHECKS = True`` a dropped connection is replaced before the task's first query,
so the task does not fail at all; ``CONN_MAX_AGE`` keeps connections across tasks (0, Django's
default, opens one per task, as per request).  Async tasks are not covered: one that uses
the ORM through ``sync_to_async`` should call ``close_old_connections`` the same way (two thread
hops per job would be too much to spend on every async task, most of which never touch it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from time import perf_counter
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("skiplock.worker")

P = ParamSpec("P")
R = TypeVar("R")

# The states of a call: queued for a thread, running in one, returned (or raised), and dropped
# (its waiter was cancelled before a thread took it: it never runs).
QUEUED, RUNNING, RETURNED, DROPPED = range(4)

# Calls that take less than this (on a moving average) are quick: a thread running one will
# soon take the next queued call, so no sleeping thread is woken for it; the watch (see
# TaskThreads._look) wakes one if a call stays queued longer than WATCH_INTERVAL all the same.
QUICK_CALL = 0.0001
WATCH_INTERVAL = 0.001
WATCH_IDLE_ROUNDS = 200  # the watch sleeps after this many looks that found nothing queued


class ThreadCall:
    """One call handed to the task threads, and what became of it."""

    __slots__ = ("error", "fn", "future", "kept", "returned", "state", "value", "waiter")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.state = QUEUED
        self.value: Any = None
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[Any] | None = None  # the event loop's (see TaskThreads.start)
        self.future: Future[Any] | None = None  # a thread's (see TaskThreads.submit)
        self.kept = False
        self.returned = False  # set (without the lock) as soon as it has


class CallFuture(Future[R]):
    """The future :meth:`TaskThreads.submit` returns: the call's outcome, and the call."""

    def __init__(self, call: ThreadCall) -> None:
        super().__init__()
        self.call = call


class TaskThreads:
    """The threads of a worker's sync tasks: one per slot, and one in place of each thread a
    stopped task keeps (see ``keep``).  A task started while Django is set up in this process
    runs between two ``close_old_connections()`` in its thread, as a request does.

    The threads live as long as the worker and take calls from one queue; a thread that
    returns takes the next queued call without sleeping, and a sleeping thread is woken only
    when no other is on its way to the queue.  Outcomes go back to the event loop in batches:
    one wake-up of the loop delivers every outcome that came in since the last one (see
    docs/design.md, "Sync tasks in batches")."""

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
        self._watched = False  # the loop looks at the queue every WATCH_INTERVAL (_look)
        self._watch_timer: asyncio.TimerHandle | None = None
        self._head_seen: ThreadCall | None = None  # the first queued call at the last look
        self._empty_looks = 0
        self._loop_thread = 0  # the event loop's thread
        self._shutdown = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._returned: deque[ThreadCall] = deque()  # outcomes the loop has not been given yet
        self._delivery_due = False  # a wake-up of the loop is on its way for them
        _ALL.add(self)

    # -- handing calls over -------------------------------------------------------------------

    def start(self, fn: Callable[[], Any]) -> ThreadCall:
        """Queue ``fn`` for a thread; its outcome comes to ``call.waiter``, a future of the
        running event loop, with the other outcomes of the same batch."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._loop_thread = threading.get_ident()
        call = ThreadCall(_in_request(fn) if django_is_set_up() else fn)
        call.waiter = loop.create_future()
        self._put(call, force=False)
        return call

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> CallFuture[R]:
        """Queue ``fn(*args, **kwargs)`` for a thread; a concurrent future for its outcome."""
        bound = functools.partial(fn, *args, **kwargs)
        call = ThreadCall(_in_request(bound) if django_is_set_up() else bound)
        future: CallFuture[R] = CallFuture(call)
        call.future = future
        future.set_running_or_notify_cancel()
        self._put(call, force=True)  # from any thread: no loop watches for it
        return future

    def _put(self, call: ThreadCall, force: bool) -> None:
        if self._shutdown:
            raise RuntimeError("the task threads are shut down")
        # The queue's append and the reads below are atomic: no lock unless a thread is to be
        # woken.  A thread about to sleep counts itself idle before it looks at the queue a
        # last time, so either it sees this call or this sees it idle.
        self._queue.append(call)
        if self._searching or (
            not force and self._running and self._call_time < QUICK_CALL and self._watched
        ):
            return
        with self._lock:
            if self._queue:
                self._hand_on(force)

    def _hand_on(self, force: bool = False) -> None:
        """With the lock held and calls queued: get a thread on its way to them, unless one
        is: a woken one, or (``force`` aside) one running a call while calls are quick, which
        will take the next when it returns (the watch makes sure it does not take too long)."""
        if self._searching:
            return
        if self._running and self._call_time < QUICK_CALL and not force and self._loop:
            if not self._watched:
                self._watched = True
                if threading.get_ident() == self._loop_thread:
                    self._loop.call_soon(self._look)  # not here: the lock is held
                else:
                    self._in_loop(self._look)
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

    def _look(self) -> None:
        """In the event loop, every WATCH_INTERVAL while calls are quick: a call queued since
        the last look gets a thread on its way (the thread that was to take it is in a call
        that is not quick after all), and outcomes a thread held back are delivered.  Stops
        after WATCH_IDLE_ROUNDS looks that found nothing to do."""
        self._watch_timer = None
        if self._shutdown or self._loop is None:
            self._watched = False
            return
        queue = self._queue
        head = queue[0] if queue else None
        if head is not None and head is self._head_seen:
            with self._lock:
                if queue and queue[0] is head:
                    self._hand_on(force=True)
        self._head_seen = head
        if self._returned:
            self._deliver()
        if head is None:
            self._empty_looks += 1
            if self._empty_looks >= WATCH_IDLE_ROUNDS:
                # Cleared before the last look at the held-back outcomes: a thread that holds
                # one back after this sees the flag clear and wakes the loop (see _serve).
                self._watched = False
                self._empty_looks = 0
                if self._returned:
                    self._deliver()
                return
        else:
            self._empty_looks = 0
        self._watch_timer = self._loop.call_later(WATCH_INTERVAL, self._look)

    def _in_loop(self, callback: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None:
            # A closed loop raises RuntimeError: nobody waits for outcomes any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback)

    def _limit(self) -> int:
        return self.concurrency + min(self.kept, self.concurrency)

    # -- the threads --------------------------------------------------------------------------

    def _serve(self) -> None:
        lock = self._lock
        queue = self._queue
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
                            if self._returned and not self._delivery_due:
                                self._wake_loop()  # an outcome this thread held back
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
            began = perf_counter()
            try:
                call.value = call.fn()
            except BaseException as exc:  # the task's own SystemExit too: its job's outcome
                call.error = exc
            self._call_time += (perf_counter() - began - self._call_time) * 0.125
            call.returned = True
            if queue and call.future is None and self._call_time < QUICK_CALL and self._watched:
                # Quick calls with more queued: this thread takes the next at once, and hands
                # this outcome back with that one's (or the loop's look takes it, if that one
                # is slow).  Appended before the flag is read again: see _look.
                self._returned.append(call)
                if not self._watched and not self._delivery_due:
                    self._wake_loop()
            else:
                self._hand_back(call)
            done = call
            del call

    def _hand_back(self, call: ThreadCall) -> None:
        """A call returned: its outcome to its future, or to the loop with the others that
        returned since the loop's last wake-up (one wake-up for them all)."""
        future = call.future
        if future is not None:
            if call.error is not None:
                future.set_exception(call.error)
            else:
                future.set_result(call.value)
            return
        # Atomic appends; the loop clears the flag before it takes the outcomes (see _deliver),
        # so an outcome it does not take finds the flag clear and wakes it again.
        self._returned.append(call)
        if not self._delivery_due:
            self._wake_loop()

    def _wake_loop(self) -> None:
        self._delivery_due = True
        self._in_loop(self._deliver)

    def _deliver(self) -> None:
        """In the event loop: hand it every outcome returned since the last delivery."""
        self._delivery_due = False
        returned = self._returned
        while returned:
            call = returned.popleft()
            waiter = call.waiter
            if waiter is None or waiter.done():  # cancelled: the job was stopped
                continue
            if call.error is not None:
                waiter.set_exception(call.error)
            else:
                waiter.set_result(call.value)

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


def django_is_set_up() -> bool:
    """True once this process has run ``django.setup()`` (never imports Django itself)."""
    apps_module = sys.modules.get("django.apps")
    if apps_module is None or "django.db" not in sys.modules:
        return False
    return bool(apps_module.apps.ready)


def _in_request(call: Callable[[], R]) -> Callable[[], R]:
    return functools.partial(_as_request, call)


def _as_request(call: Callable[[], R]) -> R:
    from django.db import close_old_connections

    close_old_connections()  # if this fails, the task has not run: its attempt fails
    try:
        return call()
    finally:
        try:
            close_old_connections()
        except Exception:
            # The task's outcome stands: closing a connection after it is not part of it.
            log.warning("closing Django's connections after a task failed", exc_info=True)
