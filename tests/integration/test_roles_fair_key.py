"""The enqueuer role learns nothing of other producers' fair-keyed jobs (issue 41).

A fair_key's turn (migration 0021) was computed by ``fair_key_turn``, a SECURITY DEFINER
function the enqueuer could execute: called directly, it told whether any key of a queue had
pending jobs, and when they were due, though the enqueuer may not read other jobs' keys or
times.  Each test logs in as the enqueuer role of `skiplock roles` (see role_logins.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.role_logins import Roles, role_logins
from skiplock import App


@pytest.fixture
def roles(pg_dsn: str, schema: str, db: psycopg.Connection[Any]) -> Iterator[Roles]:
    with role_logins(db, pg_dsn, schema) as made:
        yield made


def producer(dsn: str, schema: str) -> App:
    app = App(dsn, schema)

    @app.task(name="work", queue="fq")
    def work(n: int = 0) -> None:
        pass

    return app


def ask(dsn: str, statement: sql.Composable, params: Any = None) -> Any:
    """One statement as a login user: its first value, or the name of the error refusing it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            row = conn.execute(statement, params).fetchone()
        except psycopg.Error as exc:
            return type(exc).__name__
    return row[0] if row else None


def test_the_enqueuer_cannot_learn_other_keys_pending_jobs_from_their_turn(
    roles: Roles, pg_dsn: str, schema: str
) -> None:
    owner = producer(pg_dsn, schema)
    try:
        for n in range(3):
            owner.enqueue("work", {"n": n}, fair_key="secret-tenant")
    finally:
        owner.close()
    turn = sql.SQL("SELECT {}(%s, 0, %s)").format(sql.Identifier(schema, "fair_key_turn"))
    answers = {
        key: ask(roles.dsn["enqueuer"], turn, ["fq", key]) for key in ("secret-tenant", "nobody")
    }
    # Refused, or the same nothing whatever the queue holds.
    assert set(answers.values()) <= {None, "InsufficientPrivilege"}, answers
    empty = ask(roles.dsn["enqueuer"], turn, ["empty-queue", "nobody"])
    assert empty == answers["nobody"]
    # The times themselves stay out of reach.
    run_at = sql.SQL("SELECT max(run_at) FROM {}").format(sql.Identifier(schema, "jobs"))
    assert ask(roles.dsn["enqueuer"], run_at) == "InsufficientPrivilege"


def test_the_enqueuers_fair_keyed_jobs_still_take_turns(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """What the enqueuer may no longer read is still used for its jobs: a key's job goes to
    the front of the turns, ahead of a busy key's backlog."""
    owner, theirs = producer(pg_dsn, schema), producer(roles.dsn["enqueuer"], schema)
    try:
        busy = [owner.enqueue("work", {"n": n}, fair_key="busy").id for n in range(5)]
        mine = theirs.enqueue("work", {}, fair_key="mine").id
        late = theirs.enqueue_many("work", [{"n": n} for n in range(2)], fair_key="busy")
    finally:
        owner.close()
        theirs.close()
    order = [
        row[0]
        for row in db.execute(
            sql.SQL("SELECT id FROM {} ORDER BY run_at, id").format(sql.Identifier(schema, "jobs"))
        )
    ]
    assert order.index(mine) <= 1, order  # the first turn, with the busy key's first job
    assert order[-2:] == [j.id for j in late], order  # behind the busy key's backlog
    assert order.index(busy[0]) < order.index(busy[-1])


def test_the_function_that_gives_turns_is_no_ones_to_call(app: App, db: Any) -> None:
    """The turn is now given by a trigger whose function reads with its owner's rights:
    executable by PUBLIC (the default, before `skiplock roles` or on a server not hardened),
    a login could attach it to a temporary table of its own and read turns through it."""
    acl = db.execute(
        "SELECT coalesce(proacl::text, 'default') FROM pg_proc "
        "WHERE pronamespace = %s::regnamespace AND proname = 'fair_key_take_turn'",
        [app.schema],
    ).fetchone()
    assert acl is not None, "no trigger function fair_key_take_turn"
    public = [entry for entry in acl[0].strip("{}").split(",") if entry.startswith("=")]
    assert acl[0] != "default" and not public, acl
