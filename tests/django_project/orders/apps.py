from __future__ import annotations

from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"

    def ready(self) -> None:
        # Tasks imported while apps load (as a signals module would): no populate() re-entry.
        from orders import tasks  # noqa: F401
