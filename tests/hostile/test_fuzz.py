"""The hostile fuzz suite: generated inputs from a careless or hostile producer, against a real
server and real workers, on a queue that also holds known-good jobs.

Invariants (issue 41):
- every input handed to ``enqueue`` is refused with a documented error (``InvalidPayload``,
  ``InvalidName``, ``ValueError``, ``TypeError``) and nothing is written, or its job is written;
- every row written (through the client, or inserted with SQL as the enqueuer role) that is due
  ends ``done``, ``failed`` or ``cancelled``, a failed one with a reason of its own (never a
  lease that ran out), and none is left ``running``;
- every known-good job runs exactly once, in the same burst;
- every row renders in ``jobs list`` (table and ``--json``), ``jobs show`` and the dashboard's
  pages and API.

Each test runs once per worker model (lease, held-lock), on inputs of its own.
``SKIPLOCK_FUZZ_EXAMPLES`` sets the number of generated inputs per test (CI's quick mode: 40);
``python tests/hostile/run.py --full`` runs many more and prints what was tried, by kind.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest
from fuzz_inputs import EXAMPLES, TALLY, client_case, payload_kind, raw_row, row_kind
from hypothesis import HealthCheck, given, settings
from psycopg import sql

from helpers.dashboard_client import Browser, serving
from skiplock import App, InvalidName, InvalidPayload, Worker
from skiplock._cli.roles import RoleNames

DOCUMENTED = (InvalidPayload, InvalidName, ValueError, TypeError)
GOOD_JOBS = 20
FINAL = ("done", "failed", "cancelled")
MODELS = ("lease", "held")  # each test runs once per worker model, on inputs of its own
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def count_jobs(db: psycopg.Connection[Any], schema: str) -> int:
    row = db.execute(sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(schema)))
    return int(row.fetchone()[0])  # type: ignore[index]


@pytest.fixture
def good(app: App) -> Iterator[Counter[int]]:
    """A task that counts its runs, and GOOD_JOBS jobs of it, enqueued after the fuzz inputs."""
    runs: Counter[int] = Counter()

    @app.task(name="fuzz.good", queue="fuzz", max_attempts=1)
    def good_task(n: int) -> None:
        runs[n] += 1

    @app.task(name="fuzz.any", queue="fuzz", max_attempts=2)
    def any_task(**kwargs: Any) -> None:
        return None

    @app.task(name="fuzz.one", queue="fuzz", max_attempts=2)
    def one_task(a: int) -> int:
        return a

    yield runs


def enqueue_good(app: App) -> None:
    app.tasks["fuzz.good"].enqueue_many([{"n": n} for n in range(GOOD_JOBS)])


def run_worker(app: App, model: str) -> None:
    """A worker of ``model`` until nothing is due (a minute at most).  One model per run: a
    second worker after the first would find nothing left to claim."""
    worker = Worker(app, queues=["fuzz"], burst=True, poll_interval=0.05, model=model)  # type: ignore[arg-type]
    asyncio.run(asyncio.wait_for(worker.run(), 60))


def check_outcomes(db: psycopg.Connection[Any], schema: str, runs: Counter[int]) -> None:
    assert sorted(runs) == list(range(GOOD_JOBS)), "a good job did not run"
    assert set(runs.values()) == {1}, f"a good job ran more than once: {runs}"
    rows = db.execute(
        sql.SQL(
            "SELECT id, task, status, coalesce(last_error, '') FROM {}.jobs "
            "WHERE queue = 'fuzz' AND (status IN ('pending', 'running') "
            "  OR (status = 'failed'"
            "      AND (last_error IS NULL OR last_error LIKE 'lease expired:%%'))"
            "  OR (status = 'scheduled' AND run_at <= now())"
            "  OR (status = 'waiting' AND NOT EXISTS (SELECT 1 FROM {}.job_dependencies AS d"
            "      JOIN {}.jobs AS j ON j.id = d.depends_on"
            "      WHERE d.job_id = jobs.id AND j.status NOT IN ('done', 'failed', 'cancelled'))))"
        ).format(*[sql.Identifier(schema)] * 3)
    ).fetchall()
    assert rows == [], f"rows left unfinished or failed without a reason of their own: {rows}"
    for status, count in db.execute(
        sql.SQL("SELECT status, count(*) FROM {}.jobs GROUP BY 1").format(sql.Identifier(schema))
    ).fetchall():
        TALLY[f"rows: ended {status}"] += count


def run_cli(pg_dsn: str, schema: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *args, "--dsn", pg_dsn, "--schema", schema],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def check_rendering(app: App, db: psycopg.Connection[Any], pg_dsn: str, schema: str) -> None:
    """Every row shows in the CLI's list (table and JSON) and the dashboard's list and API; a
    sample of the oddest rows in ``jobs show`` and the dashboard's job page."""
    ids = [
        int(r[0])
        for r in db.execute(
            sql.SQL("SELECT id FROM {}.jobs ORDER BY octet_length(payload::text) DESC").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    ]
    listed = run_cli(pg_dsn, schema, "jobs", "list", "--limit", "10000")
    assert listed.returncode == 0, listed.stderr
    as_json = run_cli(pg_dsn, schema, "jobs", "list", "--limit", "10000", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert sorted(job["id"] for job in json.loads(as_json.stdout)) == sorted(ids)
    sample = ids[:5] + ids[-3:]
    for job_id in sample:
        shown = run_cli(pg_dsn, schema, "jobs", "show", str(job_id))
        assert shown.returncode == 0, f"jobs show {job_id}: {shown.stderr}"
    with serving(app) as base:
        browser = Browser(base)
        browser.log_in()
        page = browser.get("/jobs")
        assert page.status == 200, page.text[:500]
        api = browser.get("/api/jobs")
        assert api.status == 200, api.text[:500]
        for job_id in sample:
            one = browser.get(f"/jobs/{job_id}")
            assert one.status == 200, f"/jobs/{job_id}: {one.text[:500]}"
            one = browser.get(f"/api/jobs/{job_id}")
            assert one.status == 200, f"/api/jobs/{job_id}: {one.text[:500]}"
    TALLY["rows: rendered by every admin surface"] += len(ids)


@pytest.mark.parametrize("model", MODELS)
def test_every_client_input_is_refused_cleanly_or_runs(
    app: App,
    db: psycopg.Connection[Any],
    schema: str,
    pg_dsn: str,
    good: Counter[int],
    model: str,
) -> None:
    any_task = app.tasks["fuzz.any"]

    @FUZZ_SETTINGS
    @given(client_case())
    def attempt(case: tuple[dict[str, Any], Any]) -> None:
        options, payload = case
        before = count_jobs(db, schema)
        kinds = [f"option {name}" for name in sorted(options)] + [
            f"payload {payload_kind(payload)}"
        ]
        try:
            call = any_task.with_options(**options)
            if isinstance(payload, Mapping) and all(isinstance(k, str) for k in payload):
                call.enqueue(**payload)
            else:
                call.enqueue_many([payload])
        except DOCUMENTED as exc:
            assert str(exc), f"{type(exc).__name__} without a message"
            assert count_jobs(db, schema) == before, f"refused ({exc!r}) but a row was written"
            TALLY[f"client: refused ({type(exc).__name__})"] += 1
            for kind in kinds:
                TALLY[f"client, {kind}: refused"] += 1
            return
        TALLY["client: accepted"] += 1
        for kind in kinds:
            TALLY[f"client, {kind}: accepted"] += 1

    attempt()
    enqueue_good(app)
    run_worker(app, model)
    check_outcomes(db, schema, good)
    check_rendering(app, db, pg_dsn, schema)


@pytest.fixture
def enqueuer(pg_dsn: str, schema: str, db: psycopg.Connection[Any]) -> Iterator[str]:
    """The schema's least-privilege roles, made by the real command; yields the enqueuer's name."""
    names = RoleNames.for_schema(schema)
    made = run_cli(pg_dsn, schema, "roles")
    assert made.returncode == 0, made.stderr
    try:
        yield names.enqueuer
    finally:
        for name in names.all():
            if db.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name]).fetchone():
                db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def insert_as(
    db: psycopg.Connection[Any], schema: str, role: str, row: dict[str, Any]
) -> psycopg.Error | None:
    """The row inserted as ``role``; the error that refused it, if one did (nothing written)."""
    columns = list(row)
    values = []
    for name in columns:
        if name in ("run_at", "expires_at") and row[name] is not None and "now()" in row[name]:
            values.append(sql.SQL(row[name]))  # an expression of the generator's own
        else:
            values.append(sql.Literal(row[name]))
    statement = sql.SQL("INSERT INTO {}.jobs ({}) VALUES ({})").format(
        sql.Identifier(schema),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(values),
    )
    try:
        with db.transaction():
            db.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
            db.execute(statement)
    except psycopg.Error as exc:
        return exc
    return None


@pytest.mark.parametrize("model", MODELS)
def test_every_row_the_enqueuer_role_can_insert_runs_or_fails_alone(
    app: App,
    db: psycopg.Connection[Any],
    schema: str,
    pg_dsn: str,
    good: Counter[int],
    enqueuer: str,
    model: str,
) -> None:
    tasks = sorted(set(app.tasks) - {"fuzz.good"})  # the good jobs' task counts only theirs

    @FUZZ_SETTINGS
    @given(raw_row(tasks))
    def attempt(row: dict[str, Any]) -> None:
        before = count_jobs(db, schema)
        refused = insert_as(db, schema, enqueuer, row)
        outcome = "accepted" if refused is None else "refused"
        if refused is not None:
            assert count_jobs(db, schema) == before
            TALLY[f"enqueuer row: refused ({type(refused).__name__})"] += 1
        else:
            TALLY["enqueuer row: accepted"] += 1
        for kind in row_kind(row):
            TALLY[f"enqueuer row, {kind}: {outcome}"] += 1

    attempt()
    enqueue_good(app)
    run_worker(app, model)
    check_outcomes(db, schema, good)
    check_rendering(app, db, pg_dsn, schema)
