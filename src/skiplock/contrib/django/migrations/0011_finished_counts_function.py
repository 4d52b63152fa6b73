"""skiplock's schema as of its SQL migration 0026: one function that counts the finished jobs
the statements removing them pass it, instead of a copy of the same INSERT in each of them."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0010_finished_counts")]
    operations = [SkiplockMigrations(26)]
