"""Database errors are reported for what they are: only a lost or refused connection is
:class:`DatabaseUnavailable` (which invites a retry); an error about the data or a server limit
(SQLSTATE classes 22, 23, 54, ...) is not, wherever it comes from.  Every error here is a real
one from the test server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from skiplock import App, DatabaseUnavailable
from skiplock._db.connections import translate


def server_error(pg_dsn: str, statement: str) -> psycopg.Error:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            conn.execute(statement)
        except psycopg.Error as exc:
            return exc
    raise AssertionError(f"{statement!r} did not fail")


@pytest.mark.parametrize(
    ("statement", "sqlstate"),
    [
        ("SELECT 1/0", "22012"),
        ("SELECT 'x'::int", "22P02"),
        # What an oversized key in a btree index raises: program_limit_exceeded (class 54),
        # which psycopg makes an OperationalError.
        (
            "CREATE TEMP TABLE big (k text PRIMARY KEY); "
            "INSERT INTO big SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i",
            "54000",
        ),
        ("DO $$ BEGIN RAISE EXCEPTION 'full' USING ERRCODE = '53100'; END $$", "53100"),
    ],
)
def test_data_and_limit_errors_are_not_a_lost_connection(
    pg_dsn: str, statement: str, sqlstate: str
) -> None:
    error = server_error(pg_dsn, statement)
    assert error.sqlstate == sqlstate
    translated = translate(error, "skiplock")
    assert not isinstance(translated, DatabaseUnavailable), translated
    assert "connection" not in str(translated)


def test_a_terminated_session_and_a_closed_connection_are_unavailable(pg_dsn: str) -> None:
    with (
        psycopg.connect(pg_dsn, autocommit=True) as conn,
        pytest.raises(psycopg.Error) as terminated,
    ):
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    assert terminated.value.sqlstate in ("57P01", None)
    assert isinstance(translate(terminated.value, "skiplock"), DatabaseUnavailable)

    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.close()
    with pytest.raises(psycopg.OperationalError) as closed:
        conn.execute("SELECT 1")
    assert isinstance(translate(closed.value, "skiplock"), DatabaseUnavailable)


def refuse_writes(db: Any, app: App, sqlstate: str, message: str) -> None:
    """A trigger on the jobs table that fails every insert and every claim with a real server
    error of ``sqlstate`` (as an oversized key in an index would)."""
    db.execute(
        sql.SQL(
            "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION {message} USING ERRCODE = {state}; END $$; "
            "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON {jobs} "
            "FOR EACH ROW EXECUTE FUNCTION {fn}()"
        ).format(
            fn=sql.Identifier(app.schema, "refuse"),
            jobs=sql.Identifier(app.schema, "jobs"),
            message=sql.Literal(message),
            state=sql.Literal(sqlstate),
        )
    )


def test_enqueue_refused_by_a_server_limit_is_not_database_unavailable(app: App, db: Any) -> None:
    @app.task(name="t")
    def t() -> None: ...

    refuse_writes(db, app, "54000", "index row size 3000 exceeds btree version 4 maximum 2704")
    with pytest.raises(psycopg.Error) as info:
        app.enqueue("t", {})
    assert not isinstance(info.value, DatabaseUnavailable)
    assert info.value.sqlstate == "54000" and "index row size" in str(info.value)


WORKER_MODULE = """
import os
import time

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])


@app.task(name="t")
def t() -> None:
    pass
"""


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_burst_whose_claims_fail_exits_non_zero_and_says_why(
    app: App, db: Any, tmp_path: Path, model: str
) -> None:
    @app.task(name="t")
    def t() -> None: ...

    job = app.enqueue("t", {}).id
    refuse_writes(db, app, "54000", "index row size 3000 exceeds btree version 4 maximum 2704")
    (tmp_path / "jobsmod.py").write_text(WORKER_MODULE)
    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema}
    done = subprocess.run(
        [sys.executable, "-m", "skiplock", "worker", "jobsmod:app", "--burst", "--model", model,
         "--poll-interval", "0.1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "index row size" in done.stderr
    assert "lost the connection" not in done.stderr
    assert "Traceback" not in done.stderr
    status = db.execute(
        sql.SQL("SELECT status FROM {} WHERE id = %s").format(sql.Identifier(app.schema, "jobs")),
        (job,),
    ).fetchone()
    assert status == ("pending",)


def test_a_session_the_server_ended_for_idling_in_a_transaction_is_unavailable(
    app: App, pg_dsn: str
) -> None:
    """idle_in_transaction_session_timeout ends the session with a FATAL error of class 25
    (25P03), not 08 or 57: the connection is gone all the same, on the caller's own
    connection as anywhere."""

    @app.task(name="t")
    def t() -> None: ...

    with psycopg.connect(pg_dsn) as conn:
        conn.execute("SET idle_in_transaction_session_timeout = '200ms'")
        conn.execute("SELECT 1")  # in a transaction, then idle in it
        time.sleep(1.0)
        with pytest.raises(DatabaseUnavailable, match="lost the connection"):
            app.enqueue("t", {}, conn=conn)
