"""skiplock's schema as of its SQL migration 0021: a job's fair_key (jobs with the same key
share their queue's throughput with other keys' jobs) and limit_key (the key whose limits it
counts in, table key_limits), on the unmanaged Job model too."""

from __future__ import annotations

from django.db import migrations, models

from skiplock.contrib.django.schema import SkiplockMigrations


class Migration(migrations.Migration):  # type: ignore[misc]  # Django is untyped
    dependencies = [("skiplock", "0005_held_key_slots")]
    operations = [
        SkiplockMigrations(21),
        migrations.AddField(model_name="job", name="fair_key", field=models.TextField(null=True)),
        migrations.AddField(model_name="job", name="limit_key", field=models.TextField(null=True)),
    ]
