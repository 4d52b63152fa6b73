"""Writing a batch of outcomes reads only the rows it names, however many jobs are running.

20,000 jobs are analyzed while pending, then 10,000 of them are claimed: the statistics still
say that nothing runs, which is how a queue table often looks to the planner (autovacuum
analyzes it at quiet moments).  Each statement that changes claimed jobs by their claims
(finish, fail, snooze, heartbeat, cancel, release) is run with EXPLAIN ANALYZE for 50 claims,
with literal parameters and as a prepared statement's generic plan, in a rolled-back
transaction.  It must look up those 50 rows by primary key: no scan of every running job (the
partial index), of the table, or of every claim against every row.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import ClientCursor

from helpers.plans import explain, explain_generic, nodes
from skiplock import App, Claim
from skiplock._db.statement_params import claim_arrays

JOBS = 20_000
RUNNING = 10_000
BATCH = 50
WORKER = "w1"


@pytest.fixture(scope="module")
def app(pg_dsn: str) -> Iterator[App]:
    application = App(pg_dsn, f"finish_{secrets.token_hex(5)}")
    application.migrate()
    jobs = f'"{application.schema}".jobs'
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {jobs} (queue, task, payload) "
                f"SELECT 'q', 'noop', jsonb_build_object('n', g) FROM generate_series(1, {JOBS}) g"
            )
            conn.execute(f"ANALYZE {jobs}")
            conn.execute(
                f"UPDATE {jobs} SET status = 'running', attempts = 1, locked_by = %s, "
                "locked_at = now(), locked_until = now() + interval '5 minutes' "
                f"WHERE id IN (SELECT id FROM {jobs} ORDER BY id LIMIT {RUNNING})",
                (WORKER,),
            )
        yield application
    finally:
        application.sync_client.drop_schema()
        application.close()


@pytest.fixture
def claims(app: App, db: Any) -> dict[str, Any]:
    """The last 50 claims of the worker; every test leaves the table as it found it."""
    rows = db.execute(
        f'SELECT id, attempts, locked_at FROM "{app.schema}".jobs WHERE status = %s'
        " ORDER BY id DESC LIMIT %s",
        ("running", BATCH),
    ).fetchall()
    assert len(rows) == BATCH
    running = db.execute(
        f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE status = 'running'"
    ).fetchone()
    assert running == (RUNNING,)
    return claim_arrays([Claim(job_id, attempt, WORKER, at) for job_id, attempt, at in rows])


STATEMENTS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "job_complete_many": lambda c: c,
    "job_delete_many": lambda c: c,
    "job_archive_many": lambda c: c,
    "job_fail_many": lambda c: {
        **c,
        "errors": ["boom"] * BATCH,
        "retry_in": [5.0] * BATCH,
    },
    "job_snooze_many": lambda c: {**c, "delays": [0.0] * BATCH},
    "job_extend_leases": lambda c: {**c, "lease_seconds": 30.0, "now": None},
    "job_cancel_claimed_many": lambda c: c,
    "job_release_many": lambda c: c,
}


def assert_reads_only_the_claimed_rows(plan: dict[str, Any]) -> None:
    root = plan["Plan"]
    assert root["Actual Rows"] == BATCH, "every claim owned its job"
    for node in nodes(root):
        what = f"{node['Node Type']} {node.get('Index Name', '')}".strip()
        if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"]:
            read = node["Actual Rows"] * node["Actual Loops"]
            assert read <= BATCH, f"{what} read {read} rows to change {BATCH}"
            assert node.get("Index Name") == "jobs_pkey", f"{what}: not a primary-key lookup"
        removed = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Join Filter", 0)
        assert removed == 0, f"{what} looked at {removed} rows it did not change"


@pytest.fixture
def literal_conn(app: App) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app.dsn, autocommit=True, cursor_factory=ClientCursor) as conn:
        yield conn


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_custom_plan_looks_up_each_claim_by_primary_key(
    app: App, claims: dict[str, Any], literal_conn: Any, name: str
) -> None:
    with literal_conn.transaction(force_rollback=True):
        plan = explain(literal_conn, app.queries[name], STATEMENTS[name](claims), "ANALYZE,")
    assert_reads_only_the_claimed_rows(plan)


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_prepared_plan_looks_up_each_claim_by_primary_key(
    app: App, claims: dict[str, Any], literal_conn: Any, name: str
) -> None:
    with literal_conn.transaction(force_rollback=True):
        plan = explain_generic(
            literal_conn, app.queries[name], STATEMENTS[name](claims), "ANALYZE,"
        )
    assert_reads_only_the_claimed_rows(plan)
