"""skiplock's schema as of its SQL migration 0029: a keyed pending row's turn never later than
now(), held-lock slots and run marks locked FOR UPDATE, and a bounded aging step."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0013_held_key_limits_and_aging")]
    operations = [SkiplockMigrations(29)]
