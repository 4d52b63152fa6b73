from __future__ import annotations

from django.db import models


class Order(models.Model):
    total_cents = models.IntegerField()
    receipt_sent = models.BooleanField(default=False)
