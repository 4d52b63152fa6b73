"""skiplock's schema as of its SQL migration 0028: the slots that count a limited key's running
held-lock jobs, and a queue's aging step."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    # 0012 (another change's) comes between: this one depends on it once both are merged.
    dependencies = [("skiplock", "0010_finished_counts")]
    operations = [SkiplockMigrations(28)]
