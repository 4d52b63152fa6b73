"""Least-privilege roles for one skiplock schema: ``skiplock roles``.

Four roles without login, to be granted to the login users of each kind of process:

- **enqueuer**: inserts jobs (only the columns enqueue writes, and only claimable ones:
  waiting, scheduled or pending, by a row-level security policy) and reads back the few
  columns the insert returns and the idempotency-key lookup needs; it cannot read payloads or
  change or delete any job, and gives dependencies only to the jobs it inserts;
- **worker**: claims, runs and finishes jobs, reclaims expired leases, prunes, enqueues
  periodic ticks, holds the maintenance leadership and records held-lock starts; no DDL, no
  CREATE on the schema, and queue settings are read-only;
- **admin**: every row of every skiplock table (the admin CLI), plus ``pg_monitor`` so that
  ``skiplock doctor`` sees every session; still no DDL: migrations run as the schema's owner;
- **viewer**: reads jobs, archived jobs, queue settings and the migration record, and changes
  nothing (``skiplock status``, ``jobs list``, ``skiplock dashboard --read-only``).

``skiplock roles --sql`` prints the script for a DBA; without ``--sql`` it is applied at once
(creating the roles that do not exist yet), which needs a superuser or a role that owns the
schema's tables and may create roles.  The statements are in ``sql/roles/grants.sql``.
Role names are cluster-wide: roles that already have privileges in another database are
refused (the printed script stops too), so that one database's logins never reach another's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import click
import psycopg
from psycopg import Connection, sql

from skiplock._cli.admin import dsn_option, schema_option
from skiplock._db.connections import connect_kwargs, redact, resolve_dsn, translate, unavailable
from skiplock._db.payload import check_schema_name
from skiplock._db.sql import parse_blocks
from skiplock.errors import InvalidName, SchemaNotMigrated, SkiplockError

_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
GRANTS = ("role_grant_enqueuer", "role_grant_worker", "role_grant_admin", "role_grant_viewer")
TABLE_COUNT = 9  # the tables role_check_owner looks for (grants.sql)
LOCK_TIMEOUT_MS = 5000  # longest wait for the jobs table's lock (role_lock_timeout)


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


def render_sql(schema: str, roles: RoleNames, *, monitor: bool = True) -> str:
    """The whole script: the roles, then the grants in one transaction."""
    lines = [
        f"-- skiplock least-privilege roles for schema {schema}.",
        "-- 1. The roles, without login (grant them to your login users). Run these lines one",
        "--    by one, not in a transaction: a role that exists already fails harmlessly.",
    ]
    for role in roles.all():
        lines.append(statement("role_create", schema, roles, role).as_string())
    lines += [
        "",
        "-- 2. The grants, as the owner of the schema's tables (a superuser for pg_monitor).",
        "--    Safe to re-run, e.g. after `skiplock migrate`: each role is left with exactly",
        "--    these privileges.  The first statement stops the script if one of the roles",
        "--    has privileges in another database (role names are cluster-wide).",
        "BEGIN;",
    ]
    lines.append(statement("role_refuse_other_databases", schema, roles).as_string())
    lines += [s.as_string() for s in grant_statements(schema, roles, monitor=monitor)]
    lines += [
        "COMMIT;",
        "",
        "-- 3. Log in as members of the roles, e.g.:",
        f"--    CREATE ROLE web_app LOGIN PASSWORD '...' IN ROLE {roles.enqueuer};",
        f"--    CREATE ROLE job_runner LOGIN PASSWORD '...' IN ROLE {roles.worker};",
        f"--    CREATE ROLE ops LOGIN PASSWORD '...' IN ROLE {roles.admin};",
        f"--    CREATE ROLE dashboard LOGIN PASSWORD '...' IN ROLE {roles.viewer};",
    ]
    return "\n".join(lines) + "\n"


def refusal(schema: str, database: str, elsewhere: list[tuple[str, str]]) -> str:
    """Why `skiplock roles` will not grant roles that another database uses already."""
    used = "; ".join(f"{role} in database {other!r}" for role, other in elsewhere)
    prefix = re.sub(r"[^a-z0-9_]+", "_", database.lower()).strip("_")[:15] or "db"
    return (
        f"role names are cluster-wide and these roles already have privileges in another "
        f"database: {used}. Granting them here too would let that database's logins reach "
        f"the jobs of schema {schema!r} in database {database!r}: name this database's roles "
        f"with --enqueuer, --worker, --admin and --viewer (e.g. --worker "
        f"{prefix}_{schema}_worker), or take the other database's grants away first "
        "(DROP OWNED BY <role>, connected to it)"
    )


def apply(
    conn: Connection[Any], schema: str, roles: RoleNames, *, monitor: bool = True
) -> list[str]:
    """Create the missing roles and grant, in one transaction; returns the roles created."""
    try:
        with conn.transaction():
            conn.execute(statement("role_lock_timeout", schema, roles), {"ms": LOCK_TIMEOUT_MS})
            may_grant, tables = conn.execute(
                statement("role_check_owner", schema, roles), {"schema": schema}
            ).fetchone() or (False, 0)
            if tables < TABLE_COUNT:
                raise SchemaNotMigrated(schema)
            if not may_grant:
                raise SkiplockError(
                    f"user {conn.info.user!r} does not own the tables of schema {schema!r}, so "
                    "its grants would change nothing: connect as a superuser or the owner, or "
                    "print the script with --sql for a DBA"
                )
            elsewhere = conn.execute(
                statement("role_find_other_databases", schema, roles), {"names": roles.all()}
            ).fetchall()
            if elsewhere:
                raise SkiplockError(refusal(schema, conn.info.dbname, elsewhere))
            found = conn.execute(
                statement("role_find_existing", schema, roles), {"names": roles.all()}
            ).fetchall()
            existing = {row[0] for row in found}
            created = [role for role in roles.all() if role not in existing]
            for role in created:
                conn.execute(statement("role_create", schema, roles, role))
            for grants in grant_statements(schema, roles, monitor=monitor):
                conn.execute(grants, prepare=False)
    except psycopg.errors.LockNotAvailable:
        raise SkiplockError(
            f"the jobs table of schema {schema!r} stayed locked for {LOCK_TIMEOUT_MS} ms "
            "(a long held-lock job's transaction, or a migration): nothing was changed; run "
            "`skiplock roles` again when it is free (it locks the table as briefly as a "
            "migration)"
        ) from None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SkiplockError(
            f"not allowed to create the roles or grant on schema {schema!r} "
            f"({str(exc).strip().splitlines()[0]}): connect as a superuser or the owner of "
            "the schema's tables, or print the script with --sql for a DBA"
        ) from None
    except psycopg.Error as exc:
        error = translate(exc, schema)
        if error is exc:
            raise
        raise error from exc
    return created


@click.command("roles")
@dsn_option
@schema_option
@click.option("--sql", "print_sql", is_flag=True, help="Print the SQL for a DBA instead.")
@click.option("--enqueuer", help="Name of the enqueuer role (default: <schema>_enqueuer).")
@click.option("--worker", help="Name of the worker role (default: <schema>_worker).")
@click.option("--admin", help="Name of the admin role (default: <schema>_admin).")
@click.option("--viewer", help="Name of the read-only role (default: <schema>_viewer).")
@click.option(
    "--monitor/--no-monitor",
    default=True,
    show_default=True,
    help="Grant pg_monitor to the admin role (lets `skiplock doctor` see every session).",
)
def command(
    dsn: str | None,
    schema: str,
    print_sql: bool,
    enqueuer: str | None,
    worker: str | None,
    admin: str | None,
    viewer: str | None,
    monitor: bool,
) -> None:
    """Create least-privilege enqueuer, worker, admin and viewer roles for SCHEMA and grant
    to them."""
    roles = RoleNames.for_schema(
        schema, enqueuer=enqueuer, worker=worker, admin=admin, viewer=viewer
    )
    if print_sql:
        click.echo(render_sql(schema, roles, monitor=monitor), nl=False)
        return
    url = resolve_dsn(dsn)
    try:
        conn = Connection.connect(url, **connect_kwargs(url))
    except psycopg.OperationalError as exc:
        raise unavailable(exc, url) from None
    with conn:
        created = apply(conn, schema, roles, monitor=monitor)
    click.echo(
        f"roles for schema {schema} on {redact(url)}: "
        f"created {', '.join(created) or 'none (all existed)'}; granted to "
        f"{', '.join(roles.all())}"
    )
