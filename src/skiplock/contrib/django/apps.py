"""The Django app: no models; its migrations run skiplock's."""

from __future__ import annotations

from django.apps import AppConfig


class SkiplockConfig(AppConfig):  # type: ignore[misc]  # Django is untyped
    name = "skiplock.contrib.django"
    label = "skiplock"
    verbose_name = "skiplock"
