"""skiplock's schema as of its SQL migration 0027: a fair_key's turn is given by a trigger on
the jobs table, no longer by a function the enqueuer role could call to read other keys'
pending jobs."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0011_finished_counts_function")]
    operations = [SkiplockMigrations(27)]
