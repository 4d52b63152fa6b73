"""Read-only Django models over skiplock's tables (``managed = False``: skiplock's own
migrations make and change them, Django never writes their schema).  The admin lists jobs with
them (:mod:`.admin`) and the task framework's backend reads results with them, on Django's
connection (:mod:`.tasks_backend`).  Changes of state go through skiplock's API, never through
``save()``: :meth:`Job.save` and :meth:`Job.delete` refuse.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from skiplock.contrib.django import settings
from skiplock.job import JobStatus

STATUSES = [(status.value, status.value) for status in JobStatus]


class Job(models.Model):  # type: ignore[misc]  # Django is untyped
    """A row of skiplock's jobs table (see :class:`skiplock.job.Job` for the fields)."""

    id = models.BigIntegerField(primary_key=True)
    queue = models.TextField()
    task = models.TextField()
    payload = models.JSONField()
    status = models.TextField(choices=STATUSES)
    priority = models.IntegerField()
    run_at = models.DateTimeField()
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    locked_by = models.TextField(null=True)
    locked_at = models.DateTimeField(null=True)
    locked_until = models.DateTimeField(null=True)
    entity_key = models.TextField(null=True)
    idempotency_key = models.TextField(null=True)
    last_error = models.TextField(null=True)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
    result = models.JSONField(null=True)
    meta = models.JSONField(null=True)
    expires_at = models.DateTimeField(null=True)
    fair_key = models.TextField(null=True)
    limit_key = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = settings.jobs_table()
        ordering = ["-id"]
        verbose_name = "job"

    def __str__(self) -> str:
        return f"job {self.id} ({self.task}, {self.status})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("skiplock's jobs change through skiplock's API (App.retry_job, ...)")

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise TypeError("skiplock's jobs change through skiplock's API (App.cancel_job, ...)")
