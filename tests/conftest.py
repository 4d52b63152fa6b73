"""Shared fixtures: a real PostgreSQL for every test, and a fresh schema per test.

The server is ``$SKIPLOCK_TEST_DSN`` when set, else the embedded server (extra ``embedded``),
started in ``$SKIPLOCK_EMBEDDED_DIR`` or a per-user directory and stopped at exit.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from skiplock import App


def _embedded_dsn() -> str:
    from skiplock import embedded

    folder = os.environ.get("SKIPLOCK_EMBEDDED_DIR") or f"/tmp/skiplock-test-pg-{os.getuid()}"
    return embedded.start(Path(folder), announce=False)


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    dsn = os.environ.get("SKIPLOCK_TEST_DSN") or _embedded_dsn()
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        conn.execute("SELECT 1")
    return dsn


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
def db(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain autocommit connection for checking what is in the tables."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn
