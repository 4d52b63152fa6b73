"""Django's task framework, wherever it is installed: ``django.tasks`` (Django 6) or the
``django-tasks`` package (its backport, for Django 4.2 to 5.2).  Both publish the same API
but for a name or two; the backend uses only what they share.  Django 6 wins where both are
installed (tests/e2e/test_django_project.py runs on each)."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def _package() -> str:
    try:
        if importlib.util.find_spec("django.tasks") is not None:
            return "django.tasks"
    except ImportError:
        pass
    return "django_tasks"


PACKAGE = _package()
_base: Any = importlib.import_module(f"{PACKAGE}.base")
_exceptions: Any = importlib.import_module(f"{PACKAGE}.exceptions")
_signals: Any = importlib.import_module(f"{PACKAGE}.signals")
_backends: Any = importlib.import_module(f"{PACKAGE}.backends.base")

BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = _base.Task
TaskResult: Any = _base.TaskResult
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResultStatus: Any = _base.TaskResultStatus
DEFAULT_TASK_QUEUE_NAME: str = _base.DEFAULT_TASK_QUEUE_NAME
# Django 6 names it InvalidTask; the backport, InvalidTaskError.
InvalidTaskError: Any = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished


def task_backends() -> Any:
    """The framework's backends by alias (``TASKS``)."""
    return importlib.import_module(PACKAGE).task_backends
