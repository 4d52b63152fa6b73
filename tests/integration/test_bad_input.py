"""Bad input against a real server: each a clear error naming the problem and the fix, and
nothing written."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus

from helpers.stores import sync_store
from skiplock import (
    App,
    ConfigurationError,
    DatabaseUnavailable,
    InvalidName,
    InvalidPayload,
    SchemaNotMigrated,
    SkiplockError,
    UnknownTask,
    Worker,
)

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/test"
INJECTIONS = [
    "q'; DROP TABLE canary; --",
    'q"; DROP TABLE canary; --',
    "q; DROP TABLE canary",
    "x') OR 1=1 --",
]


def count_jobs(db: psycopg.Connection[Any], schema: str) -> int:
    row = db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "jobs")))
    return int(row.fetchone()[0])  # type: ignore[index]


def count_all_rows(db: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    """Rows of every table in the schema (jobs, archive, ... and the canary if present)."""
    tables = [
        r[0]
        for r in db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            [schema],
        )
    ]
    return {
        table: int(
            db.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))
            ).fetchone()[0]  # type: ignore[index]
        )
        for table in tables
    }


@pytest.fixture
def canary(db: psycopg.Connection[Any], schema: str) -> Iterator[str]:
    """A table with three rows in the test schema that no bad input may touch."""
    table = sql.Identifier(schema, "canary")
    db.execute(sql.SQL("CREATE TABLE {} (n int)").format(table))
    db.execute(sql.SQL("INSERT INTO {} VALUES (1), (2), (3)").format(table))
    yield "canary"


def canary_rows(db: psycopg.Connection[Any], schema: str) -> int:
    return int(
        db.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "canary"))
        ).fetchone()[0]  # type: ignore[index]
    )


# -- unknown task, payloads --------------------------------------------------------------


def test_unknown_task_names_it_and_how_to_register(app: App, db: Any) -> None:
    @app.task(name="known")
    def known() -> None: ...

    before = count_all_rows(db, app.schema)
    with pytest.raises(UnknownTask) as info:
        app.enqueue("nope", {})
    message = str(info.value)
    assert "'nope'" in message
    assert "@app.task(name='nope')" in message  # the fix
    assert "known" in message  # what is registered
    with pytest.raises(UnknownTask):
        app.enqueue_many("nope", [{}, {}])
    assert count_all_rows(db, app.schema) == before


@pytest.mark.parametrize(
    ("payload", "what"),
    # Types the default serializer does not encode (datetimes and sets it does: docs/tasks.md)
    [({"when": 1j}, "complex"), ({"tags": b"ab"}, "bytes")],
)
def test_payload_not_json_serialisable(
    app: App, db: Any, payload: dict[str, Any], what: str
) -> None:
    @app.task(name="report")
    def report(**kwargs: Any) -> None: ...

    before = count_all_rows(db, app.schema)
    for call in (lambda: report.enqueue(**payload), lambda: app.enqueue("report", payload)):
        with pytest.raises(InvalidPayload) as info:
            call()
        message = str(info.value)
        assert "'report'" in message and what in message
        assert "JSON" in message and "convert" in message  # problem and fix
    assert count_all_rows(db, app.schema) == before


def test_payload_over_the_configured_limit(pg_dsn: str, schema: str, db: Any) -> None:
    small = App(pg_dsn, schema, max_payload_bytes=1000)
    try:

        @small.task(name="upload")
        def upload(blob: str) -> None: ...

        before = count_jobs(db, schema)
        with pytest.raises(InvalidPayload) as info:
            upload.enqueue(blob="x" * 2000)
        message = str(info.value)
        assert "'upload'" in message
        assert "2011 bytes" in message  # {"blob":"..."} is 11 + 2000 bytes
        assert "1000 bytes" in message
        assert "max_payload_bytes" in message
        assert count_jobs(db, schema) == before
        # Just under the limit is fine.
        upload.enqueue(blob="x" * (1000 - 11))
        assert count_jobs(db, schema) == before + 1
    finally:
        small.close()


@pytest.mark.parametrize(
    "bad",
    [{"n": object()}, {"n": "x" * 2000}, {"n": float("nan")}, {"n": "nul\x00"}],
    ids=["object", "too-big", "nan", "nul"],
)
def test_one_bad_payload_in_enqueue_many_writes_nothing(
    pg_dsn: str, schema: str, db: Any, bad: dict[str, Any]
) -> None:
    application = App(pg_dsn, schema, max_payload_bytes=1000)
    try:

        @application.task(name="item")
        def item(n: Any) -> None: ...

        good = [{"n": i} for i in range(50)]
        before = count_all_rows(db, schema)
        with pytest.raises(InvalidPayload):
            item.enqueue_many([*good[:25], bad, *good[25:]])
        with pytest.raises(InvalidPayload):
            application.enqueue_many("item", [*good, bad])
        with pytest.raises(InvalidPayload):
            asyncio.run(application.enqueue_many_async("item", [bad, *good]))
        assert count_all_rows(db, schema) == before
        # The same good ones alone go in.
        assert len(item.enqueue_many(good)) == 50
        assert count_jobs(db, schema) == before["jobs"] + 50
    finally:
        application.close()


def test_bad_options_write_nothing(app: App, db: Any) -> None:
    @app.task(name="opt")
    def opt() -> None: ...

    before = count_all_rows(db, app.schema)
    with pytest.raises(ValueError, match="timezone-aware"):
        opt.with_options(run_at=datetime.now()).enqueue()  # naive
    with pytest.raises(ValueError, match="priority"):
        opt.with_options(priority=2**40).enqueue()
    with pytest.raises(ValueError, match="max_attempts"):
        opt.with_options(max_attempts=0).enqueue()
    with pytest.raises(ValueError, match="delay"):
        opt.with_options(delay=-1).enqueue()
    assert count_all_rows(db, app.schema) == before


# -- names -------------------------------------------------------------------------------


def test_invalid_queue_name(app: App, db: Any) -> None:
    @app.task(name="mail")
    def mail() -> None: ...

    before = count_all_rows(db, app.schema)
    with pytest.raises(InvalidName) as info:
        mail.with_options(queue="bad name").enqueue()
    message = str(info.value)
    assert "'bad name'" in message and "queue name" in message
    assert "letters, digits" in message  # says what is allowed
    with pytest.raises(InvalidName):
        app.enqueue("mail", {}, queue="bad name")
    with pytest.raises(InvalidName):
        app.task(name="other", queue="bad name")(lambda: None)
    assert "other" not in app.tasks
    assert count_all_rows(db, app.schema) == before


def test_invalid_schema_name_is_rejected_before_any_sql(pg_dsn: str, db: Any) -> None:
    with pytest.raises(InvalidName) as info:
        App(pg_dsn, 'x"; drop')
    assert "'x\"; drop'" in str(info.value) and "schema name" in str(info.value)
    found = db.execute(
        "SELECT count(*) FROM pg_namespace WHERE nspname LIKE %s", ["x%drop%"]
    ).fetchone()
    assert found == (0,)


@pytest.mark.parametrize("name", INJECTIONS)
def test_sql_injection_in_queue_and_task_names_is_rejected(
    app: App, db: Any, canary: str, name: str
) -> None:
    @app.task(name="safe")
    def safe(x: str = "") -> None: ...

    before = count_all_rows(db, app.schema)
    with pytest.raises(InvalidName):
        safe.with_options(queue=name).enqueue()
    with pytest.raises(InvalidName):
        app.enqueue("safe", {}, queue=name)
    with pytest.raises(InvalidName):
        app.task(name=name)(lambda: None)
    with pytest.raises(InvalidName):
        App(app.dsn, name.lower())
    with pytest.raises(UnknownTask):
        app.enqueue(name, {})
    # Payload values are bound parameters: stored verbatim, harmless.
    safe.enqueue_many([{"x": name}])
    after = count_all_rows(db, app.schema)
    assert after == {**before, "jobs": before["jobs"] + 1}
    assert canary_rows(db, app.schema) == 3
    stored = db.execute(
        sql.SQL("SELECT payload->>'x' FROM {}").format(sql.Identifier(app.schema, "jobs"))
    ).fetchall()
    assert stored == [(name,)]


# -- configuration and the database ------------------------------------------------------


@pytest.mark.parametrize("dsn", ["not a dsn===", "host=localhost port=5432 =oops", "a='unclosed"])
def test_malformed_dsn_is_a_configuration_error_showing_the_url_format(dsn: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        App(dsn)
    message = str(info.value)
    assert "invalid database URL" in message
    assert "postgresql://user:password@host:5432/dbname" in message


def test_unreachable_database_on_first_enqueue() -> None:
    app = App("postgresql://postgres:s3cret@127.0.0.1:1/test", "never_used")
    try:

        @app.task(name="t")
        def t() -> None: ...

        with pytest.raises(DatabaseUnavailable) as info:
            t.enqueue()
        message = str(info.value)
        assert "127.0.0.1" in message and "port=1" in message
        assert "Check" in message and "running" in message
        assert "s3cret" not in message  # the password is never shown
        # The second attempt says the same (no half-open pool left behind).
        with pytest.raises(DatabaseUnavailable):
            app.enqueue("t", {})
    finally:
        app.close()


def test_schema_not_migrated_tells_to_run_migrate(pg_dsn: str, db: Any) -> None:
    name = "never_migrated_xyz"
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
    app = App(pg_dsn, name)
    try:

        @app.task(name="t")
        def t() -> None: ...

        with pytest.raises(SchemaNotMigrated) as info:
            t.enqueue()
        message = str(info.value)
        assert "'never_migrated_xyz'" in message
        assert "skiplock migrate --schema never_migrated_xyz" in message
        with pytest.raises(SchemaNotMigrated):
            app.get_job(1)
        with pytest.raises(SchemaNotMigrated):
            asyncio.run(_enqueue_async_and_close(app))
    finally:
        app.close()
    exists = db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [name]).fetchone()
    assert exists == (0,), "a failed enqueue must not create the schema"


async def _enqueue_async_and_close(app: App) -> None:
    try:
        await app.enqueue_async("t", {})
    finally:
        await app.close_async()


def test_task_parameter_named_conn_is_rejected_at_registration(app: App) -> None:
    with pytest.raises(ValueError) as info:

        @app.task(name="writes")
        def writes(conn: Any, n: int) -> None: ...

    message = str(info.value)
    assert "'writes'" in message and "'conn'" in message and "rename" in message
    assert "writes" not in app.tasks


def test_duplicate_task_name_is_a_configuration_error(app: App) -> None:
    @app.task(name="dup")
    def first() -> None: ...

    with pytest.raises(ConfigurationError, match="'dup' is already registered"):

        @app.task(name="dup")
        def second() -> None: ...

    assert app.tasks["dup"].fn is first.fn


# -- the caller's transaction ------------------------------------------------------------


def test_bad_payload_in_callers_transaction_sends_nothing(app: App, db: Any, canary: str) -> None:
    @app.task(name="order_placed")
    def order_placed(order_id: int, at: Any = None) -> None: ...

    before = count_jobs(db, app.schema)
    table = sql.Identifier(app.schema, "canary")
    with psycopg.connect(app.dsn) as conn:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (42)").format(table))
        with pytest.raises(InvalidPayload):
            order_placed.enqueue(order_id=1, at=object(), conn=conn)
        with pytest.raises(InvalidName):
            order_placed.with_options(queue="no good").enqueue(order_id=1, conn=conn)
        with pytest.raises(UnknownTask):
            app.enqueue("nope", {}, conn=conn)
        # Nothing reached the server: the transaction is open and healthy.
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        assert conn.execute("SELECT 1").fetchone() == (1,)
        order_placed.enqueue(order_id=1, conn=conn)
        conn.commit()
    assert canary_rows(db, app.schema) == 4
    assert count_jobs(db, app.schema) == before + 1


def test_errors_are_skiplock_errors_with_one_line_messages(pg_dsn: str) -> None:
    errors: list[SkiplockError] = []
    for make in (lambda: App("not a dsn==="), lambda: App(pg_dsn, "Bad Schema")):
        try:
            make()
        except SkiplockError as exc:
            errors.append(exc)
    assert len(errors) == 2
    for exc in errors:
        assert "\n" not in str(exc)


# -- the command line --------------------------------------------------------------------


def _cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("SKIPLOCK_DATABASE_URL", "DATABASE_URL")
    }
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_migrate_unreachable_database_is_one_error_line(tmp_path: Path) -> None:
    result = _cli("migrate", "--dsn", "postgresql://postgres@127.0.0.1:1/x", cwd=tmp_path)
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cannot connect to PostgreSQL")
    assert "127.0.0.1" in lines[0] and "--dsn" in lines[0]
    assert result.stdout == ""


def test_cli_migrate_malformed_dsn_and_bad_schema(tmp_path: Path, pg_dsn: str) -> None:
    bad_dsn = _cli("migrate", "--dsn", "not a dsn===", cwd=tmp_path)
    assert bad_dsn.returncode == 1
    assert bad_dsn.stderr.startswith("error: invalid database URL")
    assert "postgresql://" in bad_dsn.stderr and "Traceback" not in bad_dsn.stderr
    for args in (("--dsn", pg_dsn), ("--sql",)):
        bad_schema = _cli("migrate", *args, "--schema", 'x"; drop', cwd=tmp_path)
        assert bad_schema.returncode == 1, bad_schema
        assert bad_schema.stderr.startswith("error: invalid schema name")
        assert "Traceback" not in bad_schema.stderr
        assert bad_schema.stdout == ""


def test_cli_worker_with_a_module_that_does_not_exist(tmp_path: Path, pg_dsn: str) -> None:
    result = _cli("worker", "nosuchmodule_xyz:app", "--dsn", pg_dsn, "--burst", cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "cannot import 'nosuchmodule_xyz'" in result.stderr


def test_cli_worker_with_an_attribute_that_is_not_an_app(tmp_path: Path, pg_dsn: str) -> None:
    module = f"notapp_{secrets.token_hex(3)}"
    (tmp_path / f"{module}.py").write_text("app = 42\n")
    for spec in (f"{module}:app", f"{module}:missing", module):
        result = _cli("worker", spec, "--dsn", pg_dsn, "--burst", cwd=tmp_path)
        assert result.returncode != 0, spec
        assert "Traceback" not in result.stderr
        assert spec in result.stderr or "module:attribute" in result.stderr


def test_cli_worker_max_in_flight_below_concurrency_is_a_usage_error(
    tmp_path: Path, pg_dsn: str
) -> None:
    args = ("worker", "nosuchmodule_xyz:app", "--dsn", pg_dsn, "--burst", "--concurrency", "10")
    result = _cli(*args, "--max-in-flight", "5", cwd=tmp_path)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert "--max-in-flight" in result.stderr and "less than --concurrency 10" in result.stderr
    # checked before the app is imported: the same line with a bound that fits gets that far
    fits = _cli(*args, "--max-in-flight", "10", cwd=tmp_path)
    assert "--max-in-flight" not in fits.stderr
    assert "cannot import 'nosuchmodule_xyz'" in fits.stderr


def test_worker_refuses_a_schema_missing_a_migration_and_says_which(pg_dsn: str, db: Any) -> None:
    """An upgrade deployed before `skiplock migrate` ran: the worker says so and does not start;
    a statement that needs the missing migration says the same; enqueue (which needs nothing
    new) still works, and the job runs once the schema is migrated."""
    app = App(pg_dsn, f"behind_{secrets.token_hex(4)}")
    app.migrate()
    schema = sql.Identifier(app.schema)
    try:
        db.execute(sql.SQL("DROP FUNCTION {}.entity_key_running(text)").format(schema))
        db.execute(sql.SQL("DELETE FROM {}.migrations WHERE version = 4").format(schema))

        @app.task(name="t")
        def t() -> None: ...

        t.enqueue()
        with pytest.raises(SchemaNotMigrated) as refused:
            asyncio.run(Worker(app, burst=True).run())
        assert "lacks skiplock migrations this version needs (0004)" in str(refused.value)
        assert f"run `skiplock migrate --schema {app.schema}`" in str(refused.value)
        with (
            psycopg.connect(app.dsn, autocommit=True) as conn,
            pytest.raises(SchemaNotMigrated) as claim_failed,
        ):
            sync_store(app).job_claim(conn, [t.queue], 1, "w1", 30.0)
        assert "entity_key_running" in str(claim_failed.value)
        assert "skiplock migrate" in str(claim_failed.value)

        assert app.migrate() == [4]
        assert asyncio.run(Worker(app, burst=True).run()).done == 1
    finally:
        app.sync_client.drop_schema()
        app.close()


def test_unknown_task_error_stays_short_however_many_tasks_are_registered(app: App) -> None:
    """It names the unknown task and how to register it, not every registered name (it is
    stored as a job's last_error and logged)."""
    for n in range(200):
        app.task(name=f"registered.task_{n:03d}")(lambda: None)
    with pytest.raises(UnknownTask) as info:
        app.enqueue("nope", {})
    message = str(info.value)
    assert "'nope'" in message and "@app.task(name='nope')" in message
    assert len(message) < 400, message
    assert sum(f"registered.task_{n:03d}" in message for n in range(200)) <= 3
    assert "200 tasks registered" in message
