"""Login users for the roles of `skiplock roles`, for the role tests.

The roles are created by the real command on a schema and given to LOGIN users made for the
test (the server trusts local connections, so they log in without a password).  Roles are
cluster-wide: :func:`role_logins` drops them (DROP OWNED, DROP ROLE) whatever happens.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import conninfo, sql

from skiplock._cli.roles import RoleNames

KINDS = ("enqueuer", "worker", "admin", "viewer")


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        env={**os.environ, "COLUMNS": "200"},
    )


@dataclass
class Roles:
    names: RoleNames
    dsn: dict[str, str]  # kind -> DSN of a LOGIN user that is a member of that role


def drop_roles(db: psycopg.Connection[Any], names: list[str]) -> None:
    for name in names:
        exists = db.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name]).fetchone()
        if exists:
            db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def login_users(
    db: psycopg.Connection[Any], pg_dsn: str, names: RoleNames
) -> tuple[dict[str, str], list[str]]:
    dsns, users = {}, []
    for kind in KINDS:
        role = getattr(names, kind)
        user = f"{role}_login"
        db.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                sql.Identifier(user), sql.Identifier(role)
            )
        )
        users.append(user)
        dsns[kind] = conninfo.make_conninfo(pg_dsn, user=user)
    return dsns, users


@contextmanager
def role_logins(
    db: psycopg.Connection[Any], pg_dsn: str, schema: str, *, check_created: bool = True
) -> Iterator[Roles]:
    """The roles of ``schema``, made by `skiplock roles` on the database of ``pg_dsn``, each
    with a LOGIN user; ``db`` is a superuser's connection to the same server."""
    names = RoleNames.for_schema(schema)
    users: list[str] = []
    # A hardened server, where functions are not everyone's to execute: the roles get what
    # they need explicitly (the worker's claims call the entity-key check).
    with psycopg.connect(pg_dsn, autocommit=True) as owner:
        owner.execute(
            sql.SQL("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {} FROM PUBLIC").format(
                sql.Identifier(schema)
            )
        )
    try:
        result = run_cli("roles", "--dsn", pg_dsn, "--schema", schema)
        assert result.returncode == 0, result.stderr
        if check_created:
            assert "created " + ", ".join(names.all()) in result.stdout
        dsns, users = login_users(db, pg_dsn, names)
        yield Roles(names, dsns)
    finally:
        drop_roles(db, users + names.all())


@contextmanager
def bare_login(db: psycopg.Connection[Any], dsn: str, **params: Any) -> Iterator[str]:
    """The DSN of a new LOGIN role with no privilege but CONNECT (a stranger: advisory locks
    and NOTIFY need none), dropped afterwards; ``params`` go into the DSN."""
    name = f"stranger_{secrets.token_hex(4)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        yield conninfo.make_conninfo(dsn, user=name, **params)
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
