"""Django's connection upkeep around each sync task: the task runs as a request does.

A worker runs each sync task in one of its task threads (:mod:`skiplock._runtime.task_threads`).
Django keeps a database connection per thread and looks after it only between requests: its
``request_started`` and ``request_finished`` signals call ``close_old_connections()``, which
closes a connection that has seen an error and no longer works, or is older than
``CONN_MAX_AGE``.  A worker thread serves no requests, so without that a connection the server
dropped (a restart, a failover, a pooler's idle timeout) stays in its thread and every later
task there fails with "the connection is closed" until the worker restarts: jobs end up
``failed`` for nothing.

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
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("skiplock.worker")

R = TypeVar("R")

_set_up = False  # once Django is set up it stays so: the check is then a global's read


def django_is_set_up() -> bool:
    """True once this process has run ``django.setup()`` (never imports Django itself)."""
    global _set_up
    if _set_up:
        return True
    apps_module = sys.modules.get("django.apps")
    if apps_module is None or "django.db" not in sys.modules:
        return False
    _set_up = bool(apps_module.apps.ready)
    return _set_up


def as_request_if_django(call: Callable[[], R]) -> Callable[[], R]:
    """``call`` between two ``close_old_connections()`` while Django is set up, else itself."""
    if _set_up or django_is_set_up():
        return functools.partial(_as_request, call)
    return call


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
