"""What a caller may pass as ``enqueue(conn=...)``, and the psycopg connection skiplock runs on.

The point of ``conn`` is that the job commits or rolls back with the caller's own writes.
Besides a psycopg 3 connection, it takes the objects web applications hold their transaction
in, and finds the psycopg connection under them:

- **Django** 4.2+ (``django.db.connection`` or ``connections[alias]``): Django runs on psycopg 3
  when it is installed, which skiplock's own dependency makes sure of.  Inside
  ``transaction.atomic()`` the job is part of that transaction; outside it, Django is in
  autocommit and so is the job.
- **SQLAlchemy** 2.0+ on the ``postgresql+psycopg`` dialect: a ``Session`` (Flask-SQLAlchemy's
  ``db.session`` too) or a ``Connection``, and their asyncio twins for the ``_async`` methods.
  With no transaction open yet, skiplock begins one exactly as the object's own ``execute()``
  would, so the caller's ``commit()`` commits the job and a rollback or a ``close()`` without
  commit discards it.  Taking the driver connection alone would not: SQLAlchemy, seeing no
  transaction of its own, would not commit it.

Neither library is imported; their objects are recognised by their classes.  Anything else
(a psycopg2 or asyncpg connection, an ``Engine``, a sync object given to an async method or the
other way round) is a :class:`TypeError` that says what to pass instead.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias, TypeVar

import psycopg
from psycopg import AsyncConnection, Connection

from skiplock.errors import ConfigurationError


class DjangoConnection(Protocol):
    """``django.db.connection`` or ``django.db.connections[alias]``."""

    vendor: str

    def ensure_connection(self) -> None: ...


class SqlAlchemySession(Protocol):
    """``sqlalchemy.orm.Session`` or a ``scoped_session`` (Flask-SQLAlchemy's ``db.session``)."""

    def connection(self) -> Any: ...


class SqlAlchemyConnection(Protocol):
    """``sqlalchemy.engine.Connection``."""

    def in_transaction(self) -> bool: ...


class SqlAlchemyAsyncSession(Protocol):
    """``sqlalchemy.ext.asyncio.AsyncSession`` or an ``async_scoped_session``."""

    async def connection(self) -> Any: ...


class SqlAlchemyAsyncConnection(Protocol):
    """``sqlalchemy.ext.asyncio.AsyncConnection``."""

    def in_transaction(self) -> bool: ...

    async def get_raw_connection(self) -> Any: ...


CallerConnection: TypeAlias = (
    psycopg.Connection[Any] | DjangoConnection | SqlAlchemySession | SqlAlchemyConnection
)
AsyncCallerConnection: TypeAlias = (
    psycopg.AsyncConnection[Any] | SqlAlchemyAsyncSession | SqlAlchemyAsyncConnection
)

C = TypeVar("C", Connection[Any], AsyncConnection[Any])

_SESSION = {"sqlalchemy.orm.session.Session", "sqlalchemy.orm.scoping.scoped_session"}
_CONNECTION = "sqlalchemy.engine.base.Connection"
_ASYNC_SESSION = {
    "sqlalchemy.ext.asyncio.session.AsyncSession",
    "sqlalchemy.ext.asyncio.scoping.async_scoped_session",
}
_ASYNC_CONNECTION = "sqlalchemy.ext.asyncio.engine.AsyncConnection"
_ENGINES = {"sqlalchemy.engine.base.Engine", "sqlalchemy.ext.asyncio.engine.AsyncEngine"}
# (who connects, what to do) when the driver under a framework's object is not psycopg 3
_SQLALCHEMY_DRIVER = (
    "this SQLAlchemy engine",
    "create the engine with a postgresql+psycopg:// URL",
)
_DJANGO_DRIVER = ("Django", "Django 4.2 or later uses psycopg 3, which skiplock installs")
# Any backend's DatabaseWrapper (PostGIS, instrumented wrappers...), and django.db.connection.
_DJANGO = {
    "django.db.backends.base.base.BaseDatabaseWrapper",
    "django.utils.connection.ConnectionProxy",
}


def caller_connection(conn: CallerConnection) -> Connection[Any]:
    """The psycopg connection under ``conn``, in the transaction ``conn`` has open."""
    if isinstance(conn, Connection):
        return conn
    obj: Any = conn  # recognised by class below, so typed loosely
    kinds = _class_names(obj)
    if kinds & _SESSION:
        obj = obj.connection()  # begins the session's transaction if none is open
        kinds = _class_names(obj)
    if _CONNECTION in kinds:
        if not obj.in_transaction():
            obj.begin()  # what its own execute() would do first
        return _psycopg(obj.connection.driver_connection, Connection, *_SQLALCHEMY_DRIVER)
    if kinds & _DJANGO:
        if obj.vendor != "postgresql":
            raise ConfigurationError(f"this Django connection is to {obj.vendor}, not PostgreSQL")
        obj.ensure_connection()
        return _psycopg(obj.connection, Connection, *_DJANGO_DRIVER)
    raise TypeError(_unsupported(obj, kinds, sync=True))


async def caller_connection_async(conn: AsyncCallerConnection) -> AsyncConnection[Any]:
    """The psycopg async connection under ``conn``, in the transaction ``conn`` has open."""
    if isinstance(conn, AsyncConnection):
        return conn
    obj: Any = conn
    kinds = _class_names(obj)
    if kinds & _ASYNC_SESSION:
        obj = await obj.connection()  # begins the session's transaction if none is open
        kinds = _class_names(obj)
    if _ASYNC_CONNECTION in kinds:
        if not obj.in_transaction():
            await obj.begin()  # what its own execute() would do first
        raw = await obj.get_raw_connection()
        return _psycopg(raw.driver_connection, AsyncConnection, *_SQLALCHEMY_DRIVER)
    raise TypeError(_unsupported(obj, kinds, sync=False))


def _psycopg(driver: object, expected: type[C], owner: str, hint: str) -> C:
    if isinstance(driver, expected):
        return driver
    raise TypeError(
        f"{owner} connects with {_package(driver)}, not psycopg 3, so skiplock cannot write in "
        f"its transaction: {hint}"
    )


def _unsupported(conn: object, kinds: set[str], *, sync: bool) -> str:
    name = f"{type(conn).__module__}.{type(conn).__qualname__}"
    method = "enqueue()" if sync else "enqueue_async()"
    is_async = (
        isinstance(conn, AsyncConnection)
        or bool(kinds & _ASYNC_SESSION)
        or _ASYNC_CONNECTION in kinds
    )
    is_sync = isinstance(conn, Connection) or bool(kinds & _SESSION) or _CONNECTION in kinds
    if sync and is_async:
        return f"conn is asynchronous ({name}): call the _async method, or pass a sync connection"
    if not sync and is_sync:
        return f"conn is synchronous ({name}): call the method without _async, or pass an async one"
    if not sync and kinds & _DJANGO:
        return (
            "Django's connection is synchronous: call enqueue() (from async code through "
            "asgiref's sync_to_async, as for any ORM call)"
        )
    if kinds & _ENGINES:
        return (
            f"{method} needs a transaction, and an Engine has none: pass a Session, or the "
            "Connection of engine.connect() / engine.begin()"
        )
    if _package(conn) in ("psycopg2", "asyncpg"):
        return f"conn is a {_package(conn)} connection: skiplock runs on psycopg 3 connections"
    expected = (
        "a psycopg Connection, a Django connection, or a SQLAlchemy Session or Connection"
        if sync
        else "a psycopg AsyncConnection, or a SQLAlchemy AsyncSession or AsyncConnection"
    )
    return f"conn of {method} must be {expected}, not {name}"


def _class_names(obj: object) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}


def _package(obj: object) -> str:
    return type(obj).__module__.partition(".")[0]
