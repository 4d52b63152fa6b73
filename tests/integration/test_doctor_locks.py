"""`skiplock doctor`'s ``locks`` check says what a session's lock does today (issue 41).

Held-lock jobs are counted and shown by row locks of ``held_runs`` (migration 0024): a
stranger's lock on the old advisory markers no longer delays any claim of this version.  The
check lists each session once, with every key it holds, and says what each can still do: a
limited queue's row of ``queues`` delays that queue's claims (a bounded wait, then passed over);
the markers matter only to workers of earlier versions, and an exclusive queue marker to a
held-lock claim behind a transaction-mode pooler.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.role_logins import bare_login
from skiplock import App
from skiplock._doctor.command import Doctor, Thresholds
from skiplock._doctor.findings import Finding


@pytest.fixture
def stranger(pg_dsn: str, db: Any) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit session of a new login role that has no privilege but CONNECT."""
    with bare_login(db, pg_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def locks(app: App) -> Finding:
    found = Doctor(app.dsn, app.schema, Thresholds(lock_seconds=0)).run()
    return {f.check: f for f in found}["locks"]


def test_each_session_is_listed_once_with_its_keys_and_what_they_still_do(
    app: App, stranger: psycopg.Connection[Any]
) -> None:
    app.sync_client.set_concurrency_limit("lim", 1)
    app.sync_client.set_concurrency_limit("other", 3)
    marker = "SELECT pg_advisory_lock{}(hashtext('skiplock_held_job'), hashtext(%s))"
    stranger.execute(marker.format(""), [f"{app.schema}/lim"])
    stranger.execute(marker.format("_shared"), [f"{app.schema}/other"])
    stranger.execute(
        "SELECT pg_advisory_lock_shared(hashtext(%s), 7)", [f"skiplock_held_job_id/{app.schema}"]
    )
    with psycopg.connect(app.dsn) as admin:
        admin.execute(
            sql.SQL("SELECT * FROM {} WHERE name = 'lim' FOR UPDATE").format(
                sql.Identifier(app.schema, "queues")
            )
        )
        admin_pid = admin.info.backend_pid
        finding = locks(app)
    assert finding.status == "warn"
    holders = finding.details["holders"]
    pids = [h["pid"] for h in holders]
    assert sorted(pids) == sorted({stranger.info.backend_pid, admin_pid}), holders
    mine = next(h for h in holders if h["pid"] == stranger.info.backend_pid)
    assert len(mine["keys"]) == 3, mine
    message = finding.message
    for pid in pids:
        assert message.count(f"pid {pid} ") == 1, message
    # Named as what they are, with the queue a marker is of.
    assert "'lim'" in message and "'other'" in message
    assert "queue marker" in message and "job marker" in message
    # The markers delay nothing of this version; only the queue's row delays its claims.
    assert "sessions delay claims" not in message
    assert "earlier" in message and "pooler" in message
    assert "passed over" in message


def test_a_strangers_markers_alone_are_not_said_to_delay_claims(
    app: App, stranger: psycopg.Connection[Any]
) -> None:
    stranger.execute(
        "SELECT pg_advisory_lock_shared(hashtext(%s), 7)", [f"skiplock_held_job_id/{app.schema}"]
    )
    finding = locks(app)
    assert finding.status == "warn"
    assert "delay" not in finding.message.split(".")[0], finding.message
    stranger.execute("SELECT pg_advisory_unlock_all()")
    assert locks(app).status == "ok"


def test_a_session_holding_the_migration_lock_is_named_with_what_it_delays(
    app: App, stranger: psycopg.Connection[Any]
) -> None:
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock.migrate'), hashtext(%s))", [app.schema]
    )
    finding = locks(app)
    assert finding.status == "warn"
    assert [h["pid"] for h in finding.details["holders"]] == [stranger.info.backend_pid]
    assert "migration lock" in finding.message and "skiplock migrate" in finding.message


def test_a_queue_marker_of_another_schema_is_not_this_ones(
    app: App, stranger: psycopg.Connection[Any]
) -> None:
    """A queue marker's key hashes the schema with the queue: one of a queue this schema has no
    settings for may be another schema's, and only a limited queue's count reads it."""
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_job'), hashtext(%s))",
        [f"another_schema_{app.schema}/lim"],
    )
    assert locks(app).status == "ok"
