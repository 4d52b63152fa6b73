"""Shared fixtures: a real PostgreSQL for every test, and a fresh schema per test.

The server is ``$SKIPLOCK_TEST_DSN`` when set, else the embedded server (extra ``embedded``),
started in ``$SKIPLOCK_EMBEDDED_DIR`` or a per-user directory and stopped at exit.  The few tests
that need TCP take ``tcp_pg_dsn``: the same server, or one of their own when it is reached over
a unix socket.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from helpers import stores
from helpers.stores import AsyncStore, SyncStore
from skiplock import App

# The Django project's own tests run under `manage.py test`, inside the project (see
# tests/e2e/test_django_project.py); pytest would import them without Django's settings.
collect_ignore = ["django_project"]


def _embedded_dsn() -> str:
    from skiplock._db import embedded

    folder = os.environ.get("SKIPLOCK_EMBEDDED_DIR") or f"/tmp/skiplock-test-pg-{os.getuid()}"
    return embedded.start(Path(folder), announce=False)


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    dsn = os.environ.get("SKIPLOCK_TEST_DSN") or _embedded_dsn()
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        conn.execute("SELECT 1")
    return dsn


@pytest.fixture(scope="session")
def tcp_pg_dsn(pg_dsn: str) -> Iterator[str]:
    """A server reached over TCP, for the tests of TCP settings and of dropped packets: the test
    server when it is reached over TCP, else (the embedded server's unix socket) a scratch
    cluster of the tests' own on the loopback interface, for the session."""
    host = str(conninfo.conninfo_to_dict(pg_dsn).get("host") or "")
    if host and not host.startswith("/"):
        yield pg_dsn
        return
    from helpers.scratch_pg import find_pg_bindir, scratch_cluster

    if find_pg_bindir() is None:
        pytest.skip("no initdb/pg_ctl for a PostgreSQL reached over TCP")
    with scratch_cluster() as cluster:
        yield cluster.dsn


def new_schema_name(prefix: str = "t") -> str:
    return f"{prefix}_{secrets.token_hex(5)}"


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A migrated schema of its own for one test, dropped afterwards."""
    name = new_schema_name()
    app = App(pg_dsn, name)
    app.migrate()
    try:
        yield name
    finally:
        app.sync_client.drop_schema()
        app.close()


@pytest.fixture
def app(pg_dsn: str, schema: str) -> Iterator[App]:
    """An App on the test's own migrated schema; register tasks on it freely."""
    application = App(pg_dsn, schema)
    try:
        yield application
    finally:
        application.close()


@pytest.fixture
def store(app: App) -> SyncStore:
    """The sync store (the database seam's statements) of the test's own schema; a store for
    another App comes from ``helpers.stores.sync_store``."""
    return stores.sync_store(app)


@pytest.fixture
def async_store(app: App) -> AsyncStore:
    """The async store of the test's own schema (stateless: usable in any event loop)."""
    return stores.async_store(app)


@pytest.fixture
def db(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection for checking what is in the tables."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn
