"""Issue 41: the maintenance leader reports sessions that hold a held-lock marker of its schema
without being allowed to write its jobs table (session_list_lock_strangers).  A queue marker's
key is hashtext('skiplock_held_job') and hashtext('<schema>/<queue>'): the statement matched
the first half only, so with two skiplock schemas in one database, each leader listed the
other schema's markers, and the held-lock workers of the other schema (whose role may not write
this schema's jobs) were logged as strangers, round after round."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.role_logins import bare_login
from helpers.stores import sync_store
from skiplock import App


@pytest.fixture
def other(pg_dsn: str) -> Iterator[App]:
    """An App on a second migrated schema of the same database."""
    app = App(pg_dsn, f"t_{secrets.token_hex(5)}")
    app.migrate()
    try:
        yield app
    finally:
        app.sync_client.drop_schema()
        app.close()


@pytest.fixture
def stranger(pg_dsn: str, db: Any) -> Iterator[psycopg.Connection[Any]]:
    with bare_login(db, pg_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def test_a_leader_lists_only_the_markers_of_its_own_schema(
    app: App, other: App, stranger: psycopg.Connection[Any], db: Any
) -> None:
    for each in (app, other):
        each.sync_client.set_concurrency_limit("q", 2)
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_job'), hashtext(%s))",
        [f"{other.schema}/q"],
    )
    pid = stranger.info.backend_pid
    assert [row[0] for row in sync_store(other).session_list_lock_strangers(db)] == [pid]
    assert sync_store(app).session_list_lock_strangers(db) == []


def test_a_leader_lists_the_markers_of_the_queues_it_serves(
    app: App, stranger: psycopg.Connection[Any], db: Any
) -> None:
    # A queue without settings (no row in the queues table) is matched by the worker's queues.
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_job'), hashtext(%s))",
        [f"{app.schema}/plain"],
    )
    store = sync_store(app)
    assert store.session_list_lock_strangers(db, ["other"]) == []
    listed = store.session_list_lock_strangers(db, ["plain"])
    assert [row[0] for row in listed] == [stranger.info.backend_pid]
