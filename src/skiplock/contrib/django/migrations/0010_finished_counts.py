"""skiplock's schema as of its SQL migration 0025: the counts that the statements removing
finished jobs write, so that the dashboard's charts still count the jobs that left the table."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0009_held_runs")]
    operations = [SkiplockMigrations(25)]
