"""A backend for Django's task framework (``django.tasks`` in Django 6, the ``django-tasks``
package before it) whose tasks run on skiplock's workers::

    TASKS = {"default": {"BACKEND": "skiplock.contrib.django.tasks_backend.SkiplockBackend"}}

A task enqueued through the framework is a job of one skiplock task per queue,
``django_tasks:<queue>``, registered on the app of ``SKIPLOCK_APP`` (or ``OPTIONS["APP"]``);
its payload names the framework's task (``module.function``) and holds its arguments.  The
worker (``manage.py skiplock worker``) imports that task and calls it; its return value is the
job's stored result, its exception the job's error.  ``get_result()`` reads the job on
Django's connection, through :class:`~skiplock.contrib.django.models.Job`.

OPTIONS: ``APP`` (``"module:attribute"``, default ``SKIPLOCK_APP``) and ``MAX_ATTEMPTS``
(default 1: the framework has no retries of its own; more makes skiplock retry a failed
attempt with its backoff).  See docs/frameworks.md, and for the design (one skiplock task per
queue, the error's class) docs/design.md, "Django's task framework: one skiplock task per
queue, results from the job".
"""

from __future__ import annotations

import builtins
import importlib
import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from skiplock.app import App
from skiplock.contrib.django import _framework as fw
from skiplock.contrib.django import settings
from skiplock.errors import InvalidName
from skiplock.task import JobContext

TASK_PREFIX = "django_tasks:"
# Added to the exception a task raised, so that the stored error names its class in full.
_CLASS_NOTE = "django task exception class: "
_CLASS_NOTE_LINE = re.compile(rf"^{re.escape(_CLASS_NOTE)}(\S+)\n?", re.M)
_STATUS = {
    "waiting": "READY",
    "scheduled": "READY",
    "pending": "READY",
    "running": "RUNNING",
    "done": "SUCCESSFUL",
    "failed": "FAILED",
    "cancelled": "FAILED",
}


class SkiplockBackend(fw.BaseTaskBackend):  # type: ignore[misc]  # the framework's is Any here
    """Runs the framework's tasks as skiplock jobs (priority, ``run_after``, async tasks,
    results from any process)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.app_spec: str | None = self.options.get("APP") or settings.app_spec()
        self.max_attempts = int(self.options.get("MAX_ATTEMPTS", 1))
        self._app: App | None = None

    @property
    def app(self) -> App:
        """The skiplock app the jobs are enqueued on, its queues' tasks registered."""
        if self._app is None:
            if not self.app_spec:
                from django.core.exceptions import ImproperlyConfigured

                raise ImproperlyConfigured(
                    f"TASKS[{self.alias!r}]: set SKIPLOCK_APP (or OPTIONS['APP']) to the "
                    "skiplock app whose workers run the tasks, as 'module:attribute'"
                )
            app = load_app(self.app_spec)
            for queue in sorted(self.queues) or [fw.DEFAULT_TASK_QUEUE_NAME]:
                self.task_name(app, queue)
            self._app = app
        return self._app

    def task_name(self, app: App, queue: str) -> str:
        """The skiplock task of ``queue``'s jobs, registered on ``app`` if it is not yet."""
        name = TASK_PREFIX + queue
        if name not in app.tasks:
            app.task(
                name=name,
                queue=queue,
                max_attempts=self.max_attempts,
                pass_context=True,
                store_result=True,
            )(run_task)
        return name

    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        try:
            from skiplock._db.bounds import check_queue_name

            check_queue_name(task.queue_name)
        except InvalidName as exc:
            raise fw.InvalidTaskError(str(exc)) from None

    def enqueue(self, task: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        self.validate_task(task)
        payload = {
            "task": task.module_path,
            "args": to_json(list(args)),
            "kwargs": to_json(dict(kwargs)),
            "backend": self.alias,
            "run_after": task.run_after.isoformat() if task.run_after is not None else None,
        }
        options: dict[str, Any] = {"queue": task.queue_name, "priority": -task.priority}
        if task.run_after is not None:
            options["run_at"] = aware(task.run_after)
        app = self.app
        enqueued = app.enqueue(self.task_name(app, task.queue_name), payload, **options)
        result = task_result(self._row(enqueued.id), task)
        fw.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise fw.TaskResultDoesNotExist(result_id) from None
        row = self._row(job_id)
        return task_result(row, framework_task(row.payload))

    def _row(self, job_id: int) -> Any:
        """The job, read on Django's connection (so in its transaction)."""
        from skiplock.contrib.django.models import Job

        database = getattr(self.app, "database", None) or settings.database_alias()
        row = (
            Job.objects.using(database)
            .filter(id=job_id, task__startswith=TASK_PREFIX, payload__backend=self.alias)
            .first()
        )
        if row is None:
            raise fw.TaskResultDoesNotExist(str(job_id))
        return row

    def check(self, **kwargs: Any) -> list[Any]:
        from django.core import checks

        try:
            self.app  # noqa: B018  # loads it, registers the tasks
        except Exception as exc:
            return [checks.Error(str(exc), obj=f"TASKS[{self.alias!r}]", id="skiplock.E001")]
        return []


def run_task(
    ctx: JobContext,
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    run_after: str | None = None,
) -> Any:
    """What a worker runs for a framework task's job: the task named, with its arguments."""
    framework_backend = type(fw.task_backends()[backend])
    django_task = framework_task(
        {"task": task, "backend": backend, "run_after": run_after},
        queue=ctx.job.queue,
        priority=-ctx.job.priority,
    )
    result = task_result(ctx.job, django_task, status="RUNNING")
    fw.task_started.send(framework_backend, task_result=result)
    try:
        if django_task.takes_context:
            value = django_task.call(fw.TaskContext(task_result=result), *args, **kwargs)
        else:
            value = django_task.call(*args, **kwargs)
        value = to_json(value)
    except BaseException as exc:
        note = _CLASS_NOTE + f"{type(exc).__module__}.{type(exc).__qualname__}"
        exc.add_note(note)
        failed = task_result(ctx.job, django_task, status="FAILED")
        fw.task_finished.send(framework_backend, task_result=failed)
        raise  # SystemExit and KeyboardInterrupt too: the worker fails the job with any of them
    done = task_result(ctx.job, django_task, status="SUCCESSFUL")
    object.__setattr__(done, "_return_value", value)
    fw.task_finished.send(framework_backend, task_result=done)
    return value


def framework_task(
    payload: dict[str, Any], queue: str | None = None, priority: int | None = None
) -> Any:
    """The framework's task a job's payload names, with the options it was enqueued with."""
    from django.utils.module_loading import import_string

    found = import_string(payload["task"])
    if not isinstance(found, fw.Task):
        raise TypeError(f"{payload['task']} is not a task of Django's task framework")
    run_after = payload.get("run_after")
    return found.using(
        backend=payload["backend"],
        queue_name=queue,
        priority=priority,
        run_after=datetime.fromisoformat(run_after) if run_after else None,
    )


def task_result(row: Any, task: Any, status: str | None = None) -> Any:
    """The framework's result for a job (a :class:`skiplock.job.Job` or a row of
    :class:`~skiplock.contrib.django.models.Job`): its status, times, errors and return value.
    skiplock keeps the worker of the last attempt only: it stands for every attempt."""
    payload = row.payload
    state = status or _STATUS[str(row.status)]
    attempts = row.attempts if state != "READY" or row.attempts else 0
    result = fw.TaskResult(
        task=task,
        id=str(row.id),
        status=fw.TaskResultStatus[state],
        enqueued_at=row.created_at,
        started_at=row.locked_at if attempts else None,
        last_attempted_at=row.locked_at if attempts else None,
        finished_at=row.finished_at if state in ("SUCCESSFUL", "FAILED") else None,
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=payload["backend"],
        errors=errors(row.last_error),
        worker_ids=[row.locked_by or ""] * attempts,
    )
    if state == "SUCCESSFUL":
        object.__setattr__(result, "_return_value", row.result)
    return result


def errors(last_error: str | None) -> list[Any]:
    """The framework's errors of a job's stored error: its exception class, its traceback."""
    if not last_error:
        return []
    found = _CLASS_NOTE_LINE.search(last_error)
    start = last_error.find("Traceback (most recent call last):")
    traceback = last_error[start:] if start >= 0 else last_error
    traceback = _CLASS_NOTE_LINE.sub("", traceback)
    if found is not None:
        path = found.group(1)
    else:  # cancelled, or not run: the headline's class if it is a built-in one
        name = last_error.split(":", 1)[0].strip()
        builtin = getattr(builtins, name, None)
        is_exception = isinstance(builtin, type) and issubclass(builtin, BaseException)
        path = f"builtins.{name}" if is_exception else "builtins.Exception"
    return [fw.TaskError(exception_class_path=path, traceback=traceback)]


def to_json(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists); TypeError for what it cannot
    hold, as the framework's own backends say."""
    return json.loads(json.dumps(value))


def aware(moment: datetime) -> datetime:
    """A naive ``run_after`` (settings with ``USE_TZ = False``) read in Django's time zone."""
    if moment.tzinfo is not None:
        return moment
    from django.utils import timezone

    made: datetime = timezone.make_aware(moment)
    return made


def load_app(spec: str) -> App:
    """The :class:`~skiplock.App` of ``module:attribute``."""
    module_name, _, attribute = spec.partition(":")
    app = getattr(importlib.import_module(module_name), attribute, None)
    if not isinstance(app, App):
        raise TypeError(f"{spec!r} is not a skiplock.App (module:attribute)")
    return app


def register_tasks() -> None:
    """Register the skiplock tasks of every backend of ``TASKS`` that is this one, on their
    apps: a worker process calls it before it loads its app (``manage.py skiplock``)."""
    from django.conf import settings as django_settings

    configured = getattr(django_settings, "TASKS", None) or {}
    for alias, params in configured.items():
        if params.get("BACKEND") == f"{__name__}.{SkiplockBackend.__name__}":
            backend = fw.task_backends()[alias]
            if backend.app_spec:  # else `manage.py check` says what is missing
                backend.app  # noqa: B018
