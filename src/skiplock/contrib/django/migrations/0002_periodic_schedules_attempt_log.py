"""skiplock's schema as of its SQL migration 0018: each periodic tick's schedule (0017) and each
job's attempt log (0018)."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0001_initial")]
    operations = [SkiplockMigrations(18)]
