"""skiplock's schema as of its SQL migration 0019: the progress running jobs report
(``ctx.progress``), in the table job_progress."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0003_job")]
    operations = [SkiplockMigrations(19)]
