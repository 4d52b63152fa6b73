"""Django's task framework as this project's Django has it: ``django.tasks`` from Django 6, else
the django-tasks package, its backport for Django 4.2 to 5.2 (which names one exception
differently).  The project runs on both: tests/e2e/test_django_project.py."""

from __future__ import annotations

try:
    from django.tasks import (
        TaskContext,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued

    FRAMEWORK = "django.tasks"
except ImportError:
    from django_tasks import (  # type: ignore[assignment]
        TaskContext,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django_tasks.exceptions import (  # type: ignore[assignment]
        InvalidTaskError,
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import task_enqueued  # type: ignore[assignment]

    FRAMEWORK = "django_tasks"

__all__ = [
    "FRAMEWORK",
    "InvalidTaskError",
    "TaskContext",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "default_task_backend",
    "task",
    "task_backends",
    "task_enqueued",
]
