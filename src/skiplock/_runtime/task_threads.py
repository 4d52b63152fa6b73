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

import functools
import logging
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("skiplock.worker")

P = ParamSpec("P")
R = TypeVar("R")


class TaskThreads(ThreadPoolExecutor):
    """The executor of a worker's sync tasks: one thread per slot, and one in place of each
    thread a stopped task keeps (see ``keep``).  A task submitted while Django is set up in
    this process runs between two ``close_old_connections()`` in its thread, as a request
    does."""

    def __init__(self, concurrency: int) -> None:
        super().__init__(concurrency, thread_name_prefix="skiplock-task")
        self.concurrency = concurrency
        self.kept: int = 0  # calls the worker stopped waiting for, still running in their thread
        self._kept_lock = threading.Lock()

    def keep(self, call: Future[Any], job_id: int) -> None:
        """The worker stopped waiting for ``call`` (its job timed out, or was cancelled or
        lost) but it runs on: a sync task cannot be interrupted, and this one did not return
        when told (``ctx.cancelled``).  Its thread serves no other job until it returns, so
        another thread takes its place, up to ``concurrency`` such threads at a time: the
        worker's next sync jobs do not wait behind it.  Past that, they do (and a warning
        says so)."""
        with self._kept_lock:
            if call.done():
                return
            self.kept += 1
            self._resize()
            kept = self.kept
        call.add_done_callback(self._returned)
        log.warning(
            "job %s: its sync task did not return when stopped; it keeps its thread until it "
            "does (%d kept)%s",
            job_id,
            kept,
            "" if kept <= self.concurrency else "; no thread takes its place: sync jobs wait",
        )

    def _returned(self, call: Future[Any]) -> None:
        with self._kept_lock:
            self.kept -= 1
            self._resize()

    def _resize(self) -> None:
        # ThreadPoolExecutor starts a thread for a submitted call while it has fewer than
        # _max_workers and none idle; its threads never end before shutdown, so a kept
        # thread that returns serves the next calls, and the bound only decides new ones.
        self._max_workers = self.concurrency + min(self.kept, self.concurrency)

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        if django_is_set_up():
            return super().submit(_as_request, functools.partial(fn, *args, **kwargs))
        return super().submit(fn, *args, **kwargs)


def django_is_set_up() -> bool:
    """True once this process has run ``django.setup()`` (never imports Django itself)."""
    apps_module = sys.modules.get("django.apps")
    if apps_module is None or "django.db" not in sys.modules:
        return False
    return bool(apps_module.apps.ready)


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
