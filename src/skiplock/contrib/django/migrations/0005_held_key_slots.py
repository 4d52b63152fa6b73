"""skiplock's schema as of its SQL migration 0020: the entity keys of running held-lock jobs
marked by row locks in the table held_key_slots, which only the worker role may take."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0004_job_progress")]
    operations = [SkiplockMigrations(20)]
