"""skiplock's schema as of its SQL migration 0024: running held-lock jobs marked by row locks in
the table held_runs, which only the worker role may take."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0008_finished_index_covers_charts")]
    operations = [SkiplockMigrations(24)]
