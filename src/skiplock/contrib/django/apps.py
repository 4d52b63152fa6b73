"""The Django app: no models; its migrations run skiplock's."""

from __future__ import annotations

from django.apps import AppConfig


class SkiplockConfig(AppConfig):  # type: ignore[misc]  # Django is untyped
    name = "skiplock.contrib.django"
    label = "skiplock"
    verbose_name = "skiplock"

    def ready(self) -> None:
        """Django 6 registers its task backends' system checks when ``django.tasks`` is first
        imported, which nothing else may do before ``check`` runs: with skiplock's backend in
        ``TASKS``, import it here so that its check (``SKIPLOCK_APP`` is set) always runs."""
        from skiplock.contrib.django import settings

        if settings.uses_tasks_backend():
            from skiplock.contrib.django import _framework  # noqa: F401
