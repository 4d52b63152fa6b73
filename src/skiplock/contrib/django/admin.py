"""The jobs in Django's admin (with ``django.contrib.admin`` installed): read-only lists and
pages of skiplock's jobs, and two actions, retry and cancel, that go through skiplock's API
(:meth:`~skiplock.App.retry_job`, :meth:`~skiplock.App.cancel_job`) as ``skiplock retry`` and
the dashboard do.  Viewing takes the ``skiplock.view_job`` permission, the actions
``skiplock.change_job``; nothing is added, edited or deleted through the admin."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages

from skiplock.app import App
from skiplock.contrib.django import settings
from skiplock.contrib.django.models import Job
from skiplock.errors import SkiplockError


@functools.cache
def jobs_app() -> App:
    """The app the actions go through: ``SKIPLOCK_APP``'s, else a :class:`DjangoApp`."""
    spec = settings.app_spec()
    if spec:
        from skiplock.contrib.django.tasks_backend import load_app

        return load_app(spec)
    from skiplock.contrib.django.app import DjangoApp

    return DjangoApp()


def _action(
    verb: str, done: str, call: Callable[[App, int], bool]
) -> Callable[[Any, Any, Any], None]:
    def action(model_admin: Any, request: Any, queryset: Any) -> None:
        app = jobs_app()
        changed: list[int] = []
        refused: list[int] = []
        for job_id in queryset.values_list("id", flat=True):
            try:
                ok = call(app, job_id)
            except SkiplockError as exc:  # e.g. an unfinished job holds its idempotency key
                model_admin.message_user(request, f"job {job_id}: {exc}", messages.ERROR)
                continue
            (changed if ok else refused).append(job_id)
        if changed:
            model_admin.message_user(request, f"{done}: {_ids(changed)}", messages.SUCCESS)
        if refused:
            model_admin.message_user(
                request, f"not {done} (their state does not allow it): {_ids(refused)}",
                messages.WARNING,
            )  # fmt: skip

    action.__name__ = f"{verb}_jobs"
    described = admin.action(
        description=f"{verb.capitalize()} the selected jobs", permissions=["manage"]
    )
    decorated: Callable[[Any, Any, Any], None] = described(action)
    return decorated


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, sorted(ids)))


class QueueFilter(admin.SimpleListFilter):  # type: ignore[misc]  # Django is untyped
    """The queues of the app's tasks: Django's filter of all values would read every row's
    queue (``SELECT DISTINCT``) on each page of a table that may hold millions."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        queues = sorted({task.queue for task in jobs_app().tasks.values()})
        return [(queue, queue) for queue in queues]

    def queryset(self, request: Any, queryset: Any) -> Any:
        return queryset.filter(queue=self.value()) if self.value() else queryset


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django is untyped
    list_display = ("id", "shown_task", "queue", "status", "priority", "attempts", "run_at",
                    "created_at", "finished_at")  # fmt: skip
    list_filter = ("status", QueueFilter)
    # payload__task: the function of a job of Django's task framework (tasks_backend)
    search_fields = ("task", "payload__task", "=id", "entity_key", "idempotency_key")
    date_hierarchy = "created_at"
    list_per_page = 50
    show_full_result_count = False  # a count(*) of a big jobs table on every page: no
    fields = ("id", "task", "queue", "status", "priority", "attempts", "max_attempts",
              "shown_payload", "meta", "run_at", "created_at", "locked_by", "locked_at",
              "locked_until", "finished_at", "expires_at", "entity_key", "idempotency_key",
              "last_error", "result")  # fmt: skip
    readonly_fields = fields
    actions = [
        _action("retry", "retried", lambda app, job_id: app.retry_job(job_id)),
        _action("cancel", "cancelled", lambda app, job_id: app.cancel_job(job_id)),
    ]

    @admin.display(description="task", ordering="task")  # type: ignore[untyped-decorator]
    def shown_task(self, job: Job) -> str:
        """The task; for a job of Django's task framework, the function it runs too."""
        function = job.payload.get("task") if isinstance(job.payload, dict) else None
        if job.task.startswith("django_tasks:") and isinstance(function, str):
            return f"{job.task} ({function})"
        return str(job.task)

    @admin.display(description="payload")  # type: ignore[untyped-decorator]
    def shown_payload(self, job: Job) -> Any:
        """The payload, with the fields its task marks ``secret`` shown as ``***``."""
        task = jobs_app().tasks.get(job.task)
        secret = task.settings.secret if task is not None else frozenset()
        if not secret or not isinstance(job.payload, dict):
            return job.payload
        return {k: "***" if k in secret else v for k, v in job.payload.items()}

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_manage_permission(self, request: Any) -> bool:
        """Retry and cancel: the model's change permission (the forms stay read-only)."""
        return bool(request.user.has_perm("skiplock.change_job"))
