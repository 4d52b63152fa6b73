"""A leased claim commits without waiting for the WAL flush; a held-lock claim does not.

The claim statement sets ``synchronous_commit`` for its own transaction only (see ``job_claim``
in jobs.sql): off for a leased claim, whose loss in a server crash only puts its jobs back to
pending; unchanged for a held-lock claim, whose transaction also writes the job's outcome.
Nothing is left on the session, which may be a pooler's server connection shared with others.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.stores import SyncStore
from skiplock import App
from skiplock._db.statement_params import claim_statement


@pytest.fixture
def conn(app: App) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app.dsn, autocommit=True) as connection:
        yield connection


def setting(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW synchronous_commit").fetchone()
    assert row is not None
    return str(row[0])


def enqueue_two(app: App) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": 1}, {"n": 2}])


def test_a_leased_claim_commits_asynchronously_and_leaves_the_session_as_it_was(
    app: App, store: SyncStore, conn: psycopg.Connection[Any]
) -> None:
    enqueue_two(app)
    # The statement as the worker sends it, followed in its implicit transaction (one simple
    # query of two statements) by a look at the setting its commit will use.
    name, params = claim_statement(["q"], 1, "w", 30.0, None, schema=app.schema)
    with psycopg.ClientCursor(conn) as cur:
        claim = cur.mogrify(app.queries[name].as_string(), params).rstrip().removesuffix(";")
        cur.execute(f"{claim}; SHOW synchronous_commit")
        assert len(cur.fetchall()) == 1  # the claimed job
        assert cur.nextset()
        assert cur.fetchall() == [("off",)]
    assert setting(conn) == "on"
    # Through the store, as a worker claims: the job is claimed, the session unchanged.
    assert len(store.job_claim(conn, ["q"], 1, "w", 30.0)) == 1
    assert setting(conn) == "on"


def test_a_claim_in_a_callers_transaction_makes_that_transaction_commit_asynchronously(
    app: App, store: SyncStore, conn: psycopg.Connection[Any]
) -> None:
    """As a claim from a queue with a concurrency limit runs: only claims in that transaction."""
    enqueue_two(app)
    with conn.transaction():
        assert setting(conn) == "on"
        assert len(store.job_claim(conn, ["q"], 2, "w", 30.0)) == 2
        assert setting(conn) == "off"
    assert setting(conn) == "on"


def test_a_held_lock_claim_keeps_the_sessions_commit_setting(
    app: App, store: SyncStore, conn: psycopg.Connection[Any]
) -> None:
    """Its transaction writes the job's outcome too: that commit waits as the session says."""
    enqueue_two(app)
    conn.execute("SET synchronous_commit = remote_write")
    job = store.job_claim_held(conn, ["q"], "w-held", 30.0)
    assert job is not None
    assert setting(conn) == "remote_write"
    conn.commit()
    assert setting(conn) == "remote_write"
