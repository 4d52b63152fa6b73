"""Migrations against a real server: idempotent, safe from several processes at once, the
``--sql`` script equivalent to ``migrate``; every named statement valid on the result."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import ExecStatus

from helpers.stores import sync_store
from skiplock import App
from skiplock._db.migrations import all_migrations, render_sql
from skiplock._db.sql import Queries, statements

VERSIONS = [m.version for m in all_migrations()]


def new_schema_name(prefix: str = "m") -> str:
    return f"{prefix}_{secrets.token_hex(5)}"


@pytest.fixture
def fresh_schemas(db: psycopg.Connection[Any]) -> Iterator[list[str]]:
    """Names for schemas a test creates itself; all dropped afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def schema_exists(db: psycopg.Connection[Any], name: str) -> bool:
    row = db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [name]).fetchone()
    return row == (1,)


def migration_rows(db: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    return db.execute(
        sql.SQL("SELECT version, name, applied_at FROM {} ORDER BY version").format(
            sql.Identifier(schema, "migrations")
        )
    ).fetchall()


def shape(db: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    """Tables, columns, indexes, constraints and storage options of a schema, schema-neutral."""
    columns = db.execute(
        """SELECT table_name, column_name, ordinal_position, data_type, is_nullable,
                  column_default, is_identity, identity_generation
           FROM information_schema.columns WHERE table_schema = %s
           ORDER BY table_name, ordinal_position""",
        [schema],
    ).fetchall()
    indexes = db.execute(
        "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
        "ORDER BY tablename, indexname",
        [schema],
    ).fetchall()
    constraints = db.execute(
        """SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
           FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s ORDER BY 1, 2""",
        [schema],
    ).fetchall()
    options = db.execute(
        """SELECT c.relname, c.relkind, c.reloptions FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s ORDER BY 1""",
        [schema],
    ).fetchall()
    comments = db.execute(
        """SELECT c.relname, a.attname, col_description(c.oid, a.attnum)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN pg_attribute a ON a.attrelid = c.oid
           WHERE n.nspname = %s AND col_description(c.oid, a.attnum) IS NOT NULL
           ORDER BY 1, 2""",
        [schema],
    ).fetchall()
    neutral = re.compile(rf"\b{re.escape(schema)}\b")
    return {
        "columns": columns,
        "indexes": [(t, i, neutral.sub("S", d)) for t, i, d in indexes],
        "constraints": [tuple(neutral.sub("S", str(v)) for v in row) for row in constraints],
        "options": options,
        "comments": comments,
    }


# -- idempotence -------------------------------------------------------------------------


def test_migrate_applies_everything_once_then_nothing(
    pg_dsn: str, db: Any, fresh_schemas: list[str]
) -> None:
    name = new_schema_name()
    fresh_schemas.append(name)
    app = App(pg_dsn, name)
    try:
        assert app.sync_client.pending_migrations() == VERSIONS
        assert not schema_exists(db, name), "asking what is pending must not create anything"
        assert app.migrate() == VERSIONS
        assert app.sync_client.pending_migrations() == []
        first = migration_rows(db, name)
        assert app.migrate() == []
        other = App(pg_dsn, name)
        try:
            assert other.sync_client.pending_migrations() == []
        finally:
            other.close()
    finally:
        app.close()
    rows = migration_rows(db, name)
    assert rows == first, "a second migrate must not touch the record"
    assert [(v, n) for v, n, _ in rows] == [(m.version, m.name) for m in all_migrations()]
    assert all(applied_at is not None for _, _, applied_at in rows)


def test_migrate_on_the_fixture_schema_is_a_no_op(app: App, db: Any) -> None:
    before = shape(db, app.schema)
    assert app.migrate() == []
    assert app.sync_client.pending_migrations() == []
    assert shape(db, app.schema) == before
    assert [v for v, _, _ in migration_rows(db, app.schema)] == VERSIONS


def test_migrate_async_is_idempotent_too(app: App) -> None:
    async def go() -> list[int]:
        try:
            return await app.migrate_async()
        finally:
            await app.close_async()

    assert asyncio.run(go()) == []


def test_cli_migrate_reports_applied_then_up_to_date(
    pg_dsn: str, db: Any, fresh_schemas: list[str]
) -> None:
    name = new_schema_name()
    fresh_schemas.append(name)
    env = {
        k: v for k, v in os.environ.items() if k not in ("SKIPLOCK_DATABASE_URL", "DATABASE_URL")
    }
    command = [sys.executable, "-m", "skiplock", "migrate", "--dsn", pg_dsn, "--schema", name]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    listed = ", ".join(f"{v:04d}" for v in VERSIONS)
    assert first.stdout.strip() == f"applied migrations {listed} to schema {name}"
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == f"schema {name} is up to date"
    assert [v for v, _, _ in migration_rows(db, name)] == VERSIONS


# -- concurrency -------------------------------------------------------------------------

# Each process imports skiplock, waits for a shared start time, then runs the real CLI.
_RACER = """
import sys, time
start = float(sys.argv[1])
from skiplock._cli.main import main
time.sleep(max(0.0, start - time.time()))
main(["migrate", "--dsn", sys.argv[2], "--schema", sys.argv[3]])
"""


@pytest.mark.slow
@pytest.mark.parametrize("processes", [4])
def test_concurrent_migrate_from_several_processes(
    pg_dsn: str, db: Any, fresh_schemas: list[str], processes: int
) -> None:
    name = new_schema_name()
    fresh_schemas.append(name)
    env = {
        k: v for k, v in os.environ.items() if k not in ("SKIPLOCK_DATABASE_URL", "DATABASE_URL")
    }
    start = time.time() + 3.0  # time for every interpreter to start and import
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, repr(start), pg_dsn, name],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append((proc.returncode, out.strip(), err.strip()))
    assert [rc for rc, _, _ in results] == [0] * processes, results
    outputs = sorted(out for _, out, _ in results)
    listed = ", ".join(f"{v:04d}" for v in VERSIONS)
    assert outputs.count(f"applied migrations {listed} to schema {name}") == 1, outputs
    assert outputs.count(f"schema {name} is up to date") == processes - 1, outputs
    assert [v for v, _, _ in migration_rows(db, name)] == VERSIONS
    tables = db.execute(
        "SELECT table_name, count(*) FROM information_schema.tables "
        "WHERE table_schema = %s GROUP BY table_name",
        [name],
    ).fetchall()
    assert {"jobs", "jobs_archive", "migrations"} <= {t for t, _ in tables}
    assert all(n == 1 for _, n in tables)
    # The result is the same as a migrate run alone.
    reference = new_schema_name()
    fresh_schemas.append(reference)
    alone = App(pg_dsn, reference)
    try:
        alone.migrate()
    finally:
        alone.close()
    assert shape(db, name) == shape(db, reference)


# -- the --sql script --------------------------------------------------------------------


def test_render_sql_script_builds_the_same_schema_as_migrate(
    pg_dsn: str, db: Any, fresh_schemas: list[str]
) -> None:
    migrated, scripted = new_schema_name("mig"), new_schema_name("sql")
    fresh_schemas += [migrated, scripted]
    app = App(pg_dsn, migrated)
    try:
        app.migrate()
    finally:
        app.close()
    # What a DBA would run: the CLI's output, executed as one script.
    env = {
        k: v for k, v in os.environ.items() if k not in ("SKIPLOCK_DATABASE_URL", "DATABASE_URL")
    }
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "skiplock",
            "migrate",
            "--sql",
            "--dsn",
            pg_dsn,
            "--schema",
            scripted,
        ],  # a schema that does not exist yet lacks every migration
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == render_sql(scripted)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(printed.stdout.encode())  # no parameters: sent as one simple query
    expected, got = shape(db, migrated), shape(db, scripted)
    assert got["columns"] == expected["columns"]
    assert got["indexes"] == expected["indexes"]
    assert got["constraints"] == expected["constraints"]
    assert got["options"] == expected["options"]
    assert got["comments"] == expected["comments"]
    assert [(v, n) for v, n, _ in migration_rows(db, scripted)] == [
        (v, n) for v, n, _ in migration_rows(db, migrated)
    ]
    # migrate afterwards sees everything recorded and does nothing.
    after = App(pg_dsn, scripted)
    try:
        assert after.sync_client.pending_migrations() == []
        assert after.migrate() == []
    finally:
        after.close()


def test_migrate_sql_prints_only_what_the_schema_lacks(
    pg_dsn: str, db: Any, fresh_schemas: list[str]
) -> None:
    """A DBA's upgrade script: only the migrations the schema has not applied, or with
    ``--from N`` those from N on, without asking the database."""
    migrated, old = new_schema_name("mig"), new_schema_name("old")
    fresh_schemas += [migrated, old]
    app = App(pg_dsn, migrated)
    try:
        app.migrate()
    finally:
        app.close()
    migrations = all_migrations()
    have = len(migrations) - 3  # the schema of a release three migrations ago
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        sync_store(old).migration_apply(
            conn, [(m.version, m.name, m.statement(old)) for m in migrations[:have]]
        )
    env = {
        k: v for k, v in os.environ.items() if k not in ("SKIPLOCK_DATABASE_URL", "DATABASE_URL")
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "skiplock", "migrate", "--sql", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    def printed(script: str) -> list[int]:
        return [int(v) for v in re.findall(r"^-- migration (\d{4})_", script, re.M)]

    upgrade = cli("--dsn", pg_dsn, "--schema", old)
    assert upgrade.returncode == 0, upgrade.stderr
    assert printed(upgrade.stdout) == VERSIONS[have:], upgrade.stdout
    nothing = cli("--dsn", pg_dsn, "--schema", migrated)
    assert nothing.returncode == 0, nothing.stderr
    assert printed(nothing.stdout) == [] and "up to date" in nothing.stdout, nothing.stdout
    assert "BEGIN" not in nothing.stdout
    offline = cli("--from", str(VERSIONS[-2]), "--dsn", "postgresql://nobody@127.0.0.1:1/none",
                  "--schema", old)  # fmt: skip
    assert offline.returncode == 0, offline.stderr
    assert printed(offline.stdout) == VERSIONS[-2:]
    beyond = cli("--from", str(VERSIONS[-1] + 1), "--schema", old)
    assert beyond.returncode == 2 and "--from" in beyond.stderr, beyond

    # The upgrade script brings the old schema level with the migrated one.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(upgrade.stdout.encode())
    assert shape(db, old) == shape(db, migrated)
    assert [v for v, _, _ in migration_rows(db, old)] == VERSIONS


def test_render_sql_script_is_all_or_nothing(
    pg_dsn: str, db: Any, fresh_schemas: list[str]
) -> None:
    name = new_schema_name()
    fresh_schemas.append(name)
    script = render_sql(name).replace("COMMIT;", "SELECT 1 / 0;\nCOMMIT;")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute(script.encode())
        assert conn.info.transaction_status.name in ("IDLE", "INERROR")
        if conn.info.transaction_status.name == "INERROR":
            conn.execute("ROLLBACK")
    assert not schema_exists(db, name)


# -- what the migration creates ----------------------------------------------------------


def test_jobs_table_has_autovacuum_settings_for_a_queue(app: App, db: Any) -> None:
    row = db.execute(
        """SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relname = 'jobs'""",
        [app.schema],
    ).fetchone()
    assert row is not None and row[0] is not None
    options = dict(option.split("=", 1) for option in row[0])
    assert "autovacuum_vacuum_scale_factor" in options
    assert float(options["autovacuum_vacuum_scale_factor"]) < 0.2  # below the server default
    assert "autovacuum_analyze_scale_factor" in options


def test_migrated_schema_has_the_documented_tables_and_indexes(app: App, db: Any) -> None:
    tables = {
        r[0]
        for r in db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            [app.schema],
        )
    }
    assert {"jobs", "jobs_archive", "migrations"} <= tables
    indexes = {
        r[0]: r[1]
        for r in db.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = %s AND tablename = 'jobs'",
            [app.schema],
        )
    }
    claim = indexes["jobs_claim_idx"]
    assert "(queue, priority, run_at, id)" in claim and "'pending'" in claim
    entity_key = indexes["jobs_one_running_per_entity_key"]
    assert "UNIQUE" in entity_key and "entity_key IS NOT NULL" in entity_key  # 0003
    assert "UNIQUE" in indexes["jobs_unfinished_idempotency_key"]


def _as_prepared(text: str) -> tuple[str, list[str]]:
    """psycopg's %(name)s placeholders as $n, %% as %; and the parameter names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[0] == "%%":
            return "%"
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return re.sub(r"%\((\w+)\)s|%%", number, text), names


def test_every_named_statement_is_valid_sql_on_a_migrated_schema(app: App) -> None:
    # The server parses and plans each statement (protocol-level Parse, nothing executed):
    # a typo, a missing column or table, or an untyped parameter fails here.
    queries = Queries(app.schema)
    failures = []
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute(queries["demo_tables_create"])  # the demo's statements use its own tables
        for name in sorted(statements()):
            text = queries[name].as_string(conn)
            parts = [p for p in re.split(r";\s*(?:\n|$)", text) if p.strip()]
            for i, part in enumerate(parts):
                query, _ = _as_prepared(part)
                result = conn.pgconn.prepare(f"chk_{name}_{i}".encode(), query.encode())
                if result.status != ExecStatus.COMMAND_OK:
                    failures.append(f"{name}: {result.error_message.decode().strip()}")
    assert not failures, "\n".join(failures)
