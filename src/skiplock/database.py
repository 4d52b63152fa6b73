"""Where the database comes from, and how connection problems are reported.

The DSN is, in order: the one passed in (``App(dsn=...)`` or ``--dsn``), then
``SKIPLOCK_DATABASE_URL``, then ``DATABASE_URL``, then the embedded server when the
``embedded`` extra is installed.  Otherwise a :class:`ConfigurationError` names both ways.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg import conninfo

from . import embedded
from .errors import ConfigurationError, DatabaseUnavailable, SchemaNotMigrated

ENV_VARS = ("SKIPLOCK_DATABASE_URL", "DATABASE_URL")
CONNECT_TIMEOUT = 5


def resolve_dsn(explicit: str | None = None) -> str:
    for candidate in (explicit, *(os.environ.get(name) for name in ENV_VARS)):
        if candidate:
            return check_dsn(candidate)
    return embedded.start()


def check_dsn(dsn: str) -> str:
    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"invalid database URL {redact(dsn)!r}: {_first_line(exc)}; expected e.g. "
            "postgresql://user:password@host:5432/dbname"
        ) from None
    return dsn


def redact(dsn: str) -> str:
    """The DSN with its password hidden, for messages and logs."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    if "password" in params:
        params["password"] = "***"
    return conninfo.make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def connect_kwargs(dsn: str) -> dict[str, Any]:
    """Keyword arguments for every connection skiplock opens itself."""
    params = conninfo.conninfo_to_dict(dsn)
    extra: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in params:
        extra["connect_timeout"] = CONNECT_TIMEOUT
    if "application_name" not in params:
        extra["application_name"] = "skiplock"
    return extra


def unavailable(exc: BaseException, dsn: str) -> DatabaseUnavailable:
    return DatabaseUnavailable(
        f"cannot connect to PostgreSQL at {redact(dsn)}: {_first_line(exc)}. Check that the "
        "server is running and the URL (--dsn / SKIPLOCK_DATABASE_URL) is right"
    )


def translate(exc: psycopg.Error, schema: str) -> Exception:
    """Turn a driver error into the skiplock error that explains it, or return it unchanged."""
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
        return SchemaNotMigrated(schema)
    if isinstance(exc, psycopg.errors.UndefinedFunction | psycopg.errors.UndefinedColumn):
        # skiplock's statements name only what its migrations create: the schema is older.
        return SchemaNotMigrated(schema, detail=_first_line(exc))
    if isinstance(exc, psycopg.OperationalError) and not isinstance(
        exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable
    ):
        return DatabaseUnavailable(f"lost the connection to PostgreSQL: {_first_line(exc)}")
    return exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
