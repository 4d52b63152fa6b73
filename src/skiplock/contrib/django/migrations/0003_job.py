"""The unmanaged model over skiplock's jobs table (no change to the database: Django records
the model, skiplock's own migrations own the table)."""

from __future__ import annotations

from django.db import migrations, models

from skiplock.contrib.django.settings import jobs_table
from skiplock.job import JobStatus

STATUSES = [(status.value, status.value) for status in JobStatus]


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0002_periodic_schedules_attempt_log")]
    operations = [
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("queue", models.TextField()),
                ("task", models.TextField()),
                ("payload", models.JSONField()),
                ("status", models.TextField(choices=STATUSES)),
                ("priority", models.IntegerField()),
                ("run_at", models.DateTimeField()),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("locked_by", models.TextField(null=True)),
                ("locked_at", models.DateTimeField(null=True)),
                ("locked_until", models.DateTimeField(null=True)),
                ("entity_key", models.TextField(null=True)),
                ("idempotency_key", models.TextField(null=True)),
                ("last_error", models.TextField(null=True)),
                ("created_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(null=True)),
                ("result", models.JSONField(null=True)),
                ("meta", models.JSONField(null=True)),
                ("expires_at", models.DateTimeField(null=True)),
            ],
            options={
                "verbose_name": "job",
                "db_table": jobs_table(),
                "ordering": ["-id"],
                "managed": False,
            },
        ),
    ]
