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
schema's tables and may create roles.  The statements are in ``sql/roles/grants.sql``, run by
:mod:`skiplock._db.roles`.
Role names are cluster-wide: roles that already have privileges in another database are
refused (the printed script stops too), so that one database's logins never reach another's.
"""

from __future__ import annotations

import re
from typing import Any

import click
import psycopg
from psycopg import Connection

from skiplock._cli.common import dsn_option, schema_option
from skiplock._db.connections import connect_kwargs, redact, resolve_dsn, translate, unavailable
from skiplock._db.roles import (
    TABLE_COUNT,
    RoleNames,
    grant_statements,
    role_check_owner,
    role_create,
    role_find_existing,
    role_find_other_databases,
    role_grant_all,
    role_lock_timeout,
    statement,
)
from skiplock.errors import SchemaNotMigrated, SkiplockError

__all__ = ["RoleNames", "apply", "command", "render_sql"]

LOCK_TIMEOUT_MS = 5000  # longest wait for the jobs table's lock (role_lock_timeout)


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
            role_lock_timeout(conn, schema, roles, LOCK_TIMEOUT_MS)
            may_grant, tables = role_check_owner(conn, schema, roles)
            if tables < TABLE_COUNT:
                raise SchemaNotMigrated(schema)
            if not may_grant:
                raise SkiplockError(
                    f"user {conn.info.user!r} does not own the tables of schema {schema!r}, so "
                    "its grants would change nothing: connect as a superuser or the owner, or "
                    "print the script with --sql for a DBA"
                )
            elsewhere = role_find_other_databases(conn, schema, roles)
            if elsewhere:
                raise SkiplockError(refusal(schema, conn.info.dbname, elsewhere))
            existing = role_find_existing(conn, schema, roles)
            created = [role for role in roles.all() if role not in existing]
            for role in created:
                role_create(conn, schema, roles, role)
            role_grant_all(conn, schema, roles, monitor=monitor)
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
