"""The least-privilege roles of one schema (sql/roles/grants.sql): their names, the statements
composed for them, and one function per statement that ``skiplock roles``
(:mod:`skiplock._cli.roles`) runs, named after it.  The statements are composed with the
schema, its tables and the role names quoted as identifiers; the grants, DDL, are not prepared
on the server."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from psycopg import Connection, sql

from skiplock._db.bounds import check_schema_name
from skiplock._db.sql import parse_blocks
from skiplock.errors import InvalidName

_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
GRANTS = ("role_grant_enqueuer", "role_grant_worker", "role_grant_admin", "role_grant_viewer")
TABLE_COUNT = 13  # the tables role_check_owner looks for (grants.sql)


ANY_ROW_POLICY = "skiplock_any_row"  # the jobs table's permissive policy (grants.sql)


def check_role_name(name: str) -> str:
    if not isinstance(name, str) or not _ROLE_NAME.fullmatch(name) or name.startswith("pg_"):
        raise InvalidName(
            f"invalid role name {name!r}: use 1-63 lower-case letters, digits or '_', not "
            "starting with a digit or 'pg_'"
        )
    if name == ANY_ROW_POLICY:
        # The enqueuer's policy is named after its role: it would replace this one.
        raise InvalidName(f"invalid role name {name!r}: skiplock names a policy so")
    return name


@dataclass(frozen=True)
class RoleNames:
    enqueuer: str
    worker: str
    admin: str
    viewer: str

    @classmethod
    def for_schema(
        cls,
        schema: str,
        *,
        enqueuer: str | None = None,
        worker: str | None = None,
        admin: str | None = None,
        viewer: str | None = None,
    ) -> RoleNames:
        """The given names, else ``<schema>_enqueuer``, ``<schema>_worker``, ``<schema>_admin``,
        ``<schema>_viewer``."""
        check_schema_name(schema)
        names = cls(
            check_role_name(enqueuer or f"{schema}_enqueuer"),
            check_role_name(worker or f"{schema}_worker"),
            check_role_name(admin or f"{schema}_admin"),
            check_role_name(viewer or f"{schema}_viewer"),
        )
        if len(set(names.all())) != 4:
            raise InvalidName(
                "the enqueuer, worker, admin and viewer roles need four different names"
            )
        return names

    def all(self) -> list[str]:
        return [self.enqueuer, self.worker, self.admin, self.viewer]


@cache
def _statements() -> dict[str, str]:
    text = resources.files("skiplock._db.sql").joinpath("roles", "grants.sql").read_text("utf-8")
    return {name: s.text for name, s in parse_blocks(text).items()}


def statement(name: str, schema: str, roles: RoleNames, role: str | None = None) -> sql.Composed:
    """One statement of ``grants.sql`` with the schema, its tables and the roles quoted."""
    names: dict[str, Any] = {
        "schema": sql.Identifier(schema),
        "jobs": sql.Identifier(schema, "jobs"),
        "archive": sql.Identifier(schema, "jobs_archive"),
        "queues": sql.Identifier(schema, "queues"),
        "leaders": sql.Identifier(schema, "leaders"),
        "ticks": sql.Identifier(schema, "periodic_ticks"),
        "held_starts": sql.Identifier(schema, "held_starts"),
        "held_key_slots": sql.Identifier(schema, "held_key_slots"),
        "held_runs": sql.Identifier(schema, "held_runs"),
        "held_key_runs": sql.Identifier(schema, "held_key_runs"),
        "progress": sql.Identifier(schema, "job_progress"),
        "key_limits": sql.Identifier(schema, "key_limits"),
        "finished_counts": sql.Identifier(schema, "finished_counts"),
        "workers": sql.Identifier(schema, "workers"),
        "dependencies": sql.Identifier(schema, "job_dependencies"),
        "jobs_id_seq": sql.Identifier(schema, "jobs_id_seq"),
        "migrations": sql.Identifier(schema, "migrations"),
        "enqueuer": sql.Identifier(roles.enqueuer),
        "worker": sql.Identifier(roles.worker),
        "admin": sql.Identifier(roles.admin),
        "viewer": sql.Identifier(roles.viewer),
        "role": sql.Identifier(role or roles.admin),
        "names": sql.Literal(roles.all()),
    }
    return sql.SQL(_statements()[name]).format(**names)


def grant_statements(schema: str, roles: RoleNames, *, monitor: bool = True) -> list[sql.Composed]:
    names = ["role_revoke_all", *GRANTS] + (["role_grant_monitor"] if monitor else [])
    return [statement(name, schema, roles) for name in names]


# -- the statements, run ---------------------------------------------------------------------


def role_lock_timeout(conn: Connection[Any], schema: str, roles: RoleNames, ms: int) -> None:
    """Wait at most ``ms`` milliseconds for a lock, for the rest of the transaction."""
    conn.execute(statement("role_lock_timeout", schema, roles), {"ms": ms})


def role_check_owner(conn: Connection[Any], schema: str, roles: RoleNames) -> tuple[bool, int]:
    """Whether the session may grant on the schema's tables, and how many of them exist."""
    row = conn.execute(statement("role_check_owner", schema, roles), {"schema": schema}).fetchone()
    may_grant, tables = row or (False, 0)
    return bool(may_grant), int(tables)


def role_find_other_databases(
    conn: Connection[Any], schema: str, roles: RoleNames
) -> list[tuple[str, str]]:
    """(role, database) of each of the roles that has privileges in another database."""
    rows = conn.execute(
        statement("role_find_other_databases", schema, roles), {"names": roles.all()}
    ).fetchall()
    return [(role, database) for role, database in rows]


def role_find_existing(conn: Connection[Any], schema: str, roles: RoleNames) -> set[str]:
    """Which of the roles exist."""
    rows = conn.execute(
        statement("role_find_existing", schema, roles), {"names": roles.all()}
    ).fetchall()
    return {row[0] for row in rows}


def role_create(conn: Connection[Any], schema: str, roles: RoleNames, role: str) -> None:
    conn.execute(statement("role_create", schema, roles, role))


def role_grant_all(
    conn: Connection[Any], schema: str, roles: RoleNames, *, monitor: bool = True
) -> None:
    """Leave each role with exactly its privileges: the revoke, then each role's grants (and
    pg_monitor for the admin role with ``monitor``)."""
    for grants in grant_statements(schema, roles, monitor=monitor):
        conn.execute(grants, prepare=False)
