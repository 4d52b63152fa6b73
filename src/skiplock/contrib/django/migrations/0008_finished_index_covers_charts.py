"""skiplock's schema as of its SQL migration 0023: the index of finished jobs also holds the
columns the dashboard's charts read, so that they read the index alone."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0007_archive_retention")]
    operations = [SkiplockMigrations(23)]
