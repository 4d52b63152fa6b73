"""skiplock's schema as of its SQL migration 0022: an index of the archive by finish time, which
its retention prunes by."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0006_job_fair_key")]
    operations = [SkiplockMigrations(22)]
