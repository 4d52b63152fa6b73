"""The Django migration operation that runs skiplock's own migrations.

Each Django migration of this app applies skiplock's numbered SQL migrations up to a fixed
version, in the Django migration's transaction, on the ``SKIPLOCK_DATABASE`` alias only (other
aliases are left alone).  When skiplock ships a new SQL migration, a new Django migration here
runs it (``tests/integration/test_django_conn.py`` checks that the last one reaches the last
SQL migration).  Applying is idempotent: a schema ``skiplock migrate`` already migrated is left
as it is, and either tool can upgrade it later.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from skiplock.app import App
from skiplock.contrib.django import settings


class SkiplockMigrations(migrations.RunPython):  # type: ignore[misc]  # Django is untyped
    """Apply skiplock's SQL migrations numbered ``up_to`` or less.

    Reversing the ``first`` one drops skiplock's schema with every job in it (``manage.py
    migrate skiplock zero``).  skiplock's SQL migrations have no reverse: reversing a later one
    leaves the schema as it is (a no-op, so that ``zero`` gets past it to the drop), and
    applying it again applies nothing new."""

    def __init__(self, up_to: int, *, first: bool = False) -> None:
        self.up_to = up_to
        backward = self._backward if first else migrations.RunPython.noop
        super().__init__(self._forward, backward, elidable=False)

    def describe(self) -> str:
        return f"Apply skiplock's SQL migrations up to {self.up_to:04d}"

    def _forward(self, apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.alias == settings.database_alias():
            _app().sync_client.migrate(schema_editor.connection, up_to=self.up_to)

    def _backward(self, apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.alias == settings.database_alias():
            _app().sync_client.drop_schema(schema_editor.connection)


def _app() -> App:
    # Only its statements are used, on Django's connection: it opens no pool of its own.
    return App(schema=settings.schema())
