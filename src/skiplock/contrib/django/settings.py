"""skiplock's Django settings, and the DSN of the database they name."""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import make_conninfo

from skiplock.errors import ConfigurationError

# What Django's backend passes psycopg besides libpq's parameters: not part of a DSN.
_NOT_LIBPQ = {
    "context", "cursor_factory", "prepare_threshold",
    "isolation_level", "server_side_binding", "assume_role", "pool",
}  # fmt: skip


def setting(name: str, default: str) -> str:
    from django.conf import settings

    value = getattr(settings, name, default)
    if not isinstance(value, str):
        raise ConfigurationError(f"settings.{name} must be a str, not {type(value).__name__}")
    return value


def database_alias() -> str:
    """The alias of ``DATABASES`` skiplock's tables live in (``SKIPLOCK_DATABASE``)."""
    return setting("SKIPLOCK_DATABASE", "default")


def schema() -> str:
    """The schema of skiplock's tables (``SKIPLOCK_SCHEMA``)."""
    return setting("SKIPLOCK_SCHEMA", "skiplock")


def jobs_table() -> str:
    """The ``db_table`` of skiplock's jobs in its schema: Django quotes a table name whole, so
    ``<schema>"."jobs`` comes out as ``"<schema>"."jobs"``."""
    return f'{schema()}"."jobs'


def app_spec() -> str | None:
    """``SKIPLOCK_APP``: the ``module:attribute`` the commands run, if set."""
    value = setting("SKIPLOCK_APP", "")
    return value or None


def uses_tasks_backend() -> bool:
    """Whether ``TASKS`` (Django's task framework) names skiplock's backend."""
    from django.conf import settings

    configured = getattr(settings, "TASKS", None) or {}
    return isinstance(configured, dict) and any(
        isinstance(params, dict)
        and params.get("BACKEND") == "skiplock.contrib.django.tasks_backend.SkiplockBackend"
        for params in configured.values()
    )


def dsn(alias: str | None = None) -> str:
    """A libpq URL of the database Django connects to as ``alias``: its NAME, USER, PASSWORD,
    HOST, PORT and OPTIONS, as the test runner left them (``test_<NAME>`` in tests)."""
    from django.db import connections

    wrapper = connections[alias or database_alias()]
    if wrapper.vendor != "postgresql":
        raise ConfigurationError(
            f"DATABASES[{wrapper.alias!r}] is {wrapper.vendor}, not PostgreSQL"
        )
    params: dict[str, Any] = {
        key: value
        for key, value in wrapper.get_connection_params().items()
        if key not in _NOT_LIBPQ and value not in (None, "")
    }
    return make_conninfo("", **params)
