"""Locks another session holds must not stall `skiplock migrate` silently (issue 41).

A *stranger* (a login with nothing but CONNECT) may take the migrators' advisory lock; any
session that touches the jobs table holds a lock a migration's DDL must wait for.  A migrate
with nothing pending takes no lock at all; one with work waits for the migrators' lock a bounded
time, saying who holds it, and its DDL waits a bounded time for the tables' locks.  Every
connection here has a generous statement_timeout, so a migrate that waits without bound fails
the test instead of hanging it.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.role_logins import bare_login
from skiplock import App
from skiplock._db.migrations import all_migrations
from skiplock.errors import MigrationLockBusy

WAIT_GUARD_MS = 8000  # a statement that waits this long fails the test
LATEST = all_migrations()[-1].version
# The last migration that locks the jobs table (an index, a trigger, a column on it).
ON_JOBS = max(
    m.version
    for m in all_migrations()
    if re.search(r"(ALTER TABLE|INDEX \w+ ON|TRIGGER [\s\S]+? ON) \{schema\}\.jobs\b", m.text)
)


@pytest.fixture
def stranger(pg_dsn: str, db: Any) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit session of a new login role that has no privilege but CONNECT."""
    with (
        bare_login(db, pg_dsn, application_name="squatter") as dsn,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        yield conn


@pytest.fixture
def fresh(pg_dsn: str, db: Any) -> Iterator[App]:
    """An app on a schema of its own that nothing has migrated yet."""
    name = f"ml_{secrets.token_hex(4)}"
    app = App(pg_dsn, name)
    try:
        yield app
    finally:
        app.close()
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def guarded(app: App) -> psycopg.Connection[Any]:
    return psycopg.connect(
        app.dsn, autocommit=True, options=f"-c statement_timeout={WAIT_GUARD_MS}"
    )


def squat(stranger: psycopg.Connection[Any], schema: str) -> None:
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock.migrate'), hashtext(%s))", [schema]
    )


def test_a_strangers_migrate_lock_does_not_stall_a_migrate_with_nothing_to_do(
    app: App, stranger: psycopg.Connection[Any]
) -> None:
    squat(stranger, app.schema)
    started = time.monotonic()
    with guarded(app) as conn:
        assert app.sync_client.migrate(conn) == []
    assert time.monotonic() - started < WAIT_GUARD_MS / 2000


def test_a_migrate_with_work_waits_a_bounded_time_and_names_who_holds_the_lock(
    fresh: App, stranger: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    squat(stranger, fresh.schema)
    started = time.monotonic()
    with (
        guarded(fresh) as conn,
        caplog.at_level(logging.WARNING, logger="skiplock"),
        pytest.raises(MigrationLockBusy) as busy,
    ):
        fresh.sync_client.migrate(conn, lock_wait=1.5)
    waited = time.monotonic() - started
    assert 1.5 <= waited < WAIT_GUARD_MS / 1000
    pid = str(stranger.info.backend_pid)
    message = str(busy.value)
    assert pid in message and "squatter" in message and stranger.info.user in message
    assert "--lock-wait" in message  # how to wait longer
    logged = [r.getMessage() for r in caplog.records if pid in r.getMessage()]
    assert len(logged) == 1, logged  # once at first, then every few seconds
    assert fresh.sync_client.pending_migrations() == [m.version for m in all_migrations()]


def test_a_migrate_with_work_goes_ahead_once_the_lock_is_let_go(
    fresh: App, stranger: psycopg.Connection[Any]
) -> None:
    squat(stranger, fresh.schema)
    release = threading.Timer(1.0, stranger.execute, ["SELECT pg_advisory_unlock_all()"])
    release.start()
    try:
        with guarded(fresh) as conn:
            assert fresh.sync_client.migrate(conn) == [m.version for m in all_migrations()]
    finally:
        release.join()


def test_a_migrations_ddl_gives_up_on_a_locked_jobs_table_with_a_clear_error(
    fresh: App, pg_dsn: str
) -> None:
    """A session that keeps the jobs table locked (an open transaction that locked it, or one
    whose lock conflicts with the DDL, such as a held-lock job's) fails the migration after
    lock_timeout instead of leaving it waiting, with every worker queued behind its request."""
    assert fresh.sync_client.migrate(up_to=ON_JOBS - 1) == list(range(1, ON_JOBS))
    jobs = sql.Identifier(fresh.schema, "jobs")
    with psycopg.connect(pg_dsn, application_name="table-locker") as locker:
        locker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(jobs))
        started = time.monotonic()
        with guarded(fresh) as conn, pytest.raises(MigrationLockBusy) as busy:
            fresh.sync_client.migrate(conn, lock_timeout=0.5)
        assert time.monotonic() - started < WAIT_GUARD_MS / 2000
        assert "lock_timeout=0.5" in str(busy.value) and "nothing applied" in str(busy.value)
        locker.rollback()
    pending = list(range(ON_JOBS, LATEST + 1))
    assert fresh.sync_client.pending_migrations() == pending
    assert fresh.sync_client.migrate() == pending
