"""skiplock's schema as of its SQL migration 0016 (created, or upgraded to it)."""

from __future__ import annotations

from django.db import migrations

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [SkiplockMigrations(16, first=True)]
