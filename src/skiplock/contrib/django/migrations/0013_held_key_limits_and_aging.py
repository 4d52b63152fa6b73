"""skiplock's schema as of its SQL migration 0028: the slots that count a limited key's running
held-lock jobs, and a queue's aging step."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0012_fair_key_turn_by_trigger")]
    operations = [SkiplockMigrations(28)]
