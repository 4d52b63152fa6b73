"""Rows from before the bounds of migration 0015 (or that break them some other way): the
migration never fails on them, fails the unfinished ones a worker could not run, and every
admin surface (CLI, --json, dashboard pages and API) still shows them all."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from helpers.bad_rows import insert_sql
from helpers.bad_rows import nested_payload as nested
from helpers.dashboard_client import Browser, serving
from skiplock import App, InvalidPayload
from skiplock._cli.main import main as cli_main
from skiplock._db.migrations import all_migrations
from skiplock.bulk import JobFilter
from skiplock.job import JobStatus

BOUNDS_MIGRATION = next(m.version for m in all_migrations() if m.name == "value_bounds")


@pytest.fixture
def old_schema(pg_dsn: str) -> Iterator[App]:
    """An App on a schema migrated up to the migration before the bounds."""
    application = App(pg_dsn, f"b_{secrets.token_hex(5)}")
    before = [m for m in all_migrations() if m.version < BOUNDS_MIGRATION]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        application.sync_client.store.migration_apply(
            conn, [(m.version, m.name, m.statement(application.schema)) for m in before]
        )
    try:
        yield application
    finally:
        application.sync_client.drop_schema()
        application.close()


def test_rows_from_before_the_bounds_show_on_every_admin_surface(
    old_schema: App, db: psycopg.Connection[Any]
) -> None:
    app = old_schema
    s = app.schema
    huge_text = '{"n": 1' + "0" * 5000 + "}"
    far = insert_sql(db, s, run_at="33715-01-01 00:00+00", status="scheduled")
    endless = insert_sql(db, s, run_at="infinity", expires_at="-infinity")
    deep = insert_sql(db, s, payload=json.dumps(nested(500)), meta=json.dumps(nested(300)))
    huge = insert_sql(db, s, payload=huge_text)
    gone = insert_sql(db, s, run_at="33715-01-01 00:00+00", status="cancelled")
    fine = insert_sql(db, s, payload='{"n": 1}')
    running = insert_sql(db, s, status="running", entity_key="k" * 600, locked_by="w",
                         locked_at="now", locked_until="infinity")  # fmt: skip
    # never fails on rows it would refuse (nor do the migrations after it)
    assert app.migrate() == [m.version for m in all_migrations() if m.version >= BOUNDS_MIGRATION]

    # The unfinished rows no worker could run failed, naming the bound; the others stay.
    rows = db.execute(
        sql.SQL("SELECT id, status, last_error FROM {}").format(sql.Identifier(s, "jobs"))
    ).fetchall()
    statuses = {job_id: status for job_id, status, _ in rows}
    assert statuses == {far: "failed", endless: "failed", deep: "failed", huge: "failed",
                        gone: "cancelled", fine: "pending", running: "failed"}  # fmt: skip
    errors = {job_id: error for job_id, _, error in rows}
    assert "jobs_bound_run_at" in errors[far] and "jobs_bound_payload" in errors[huge]
    assert "jobs_bound_entity_key" in errors[running]
    assert app.sync_client.cancel_or_request(fine) == "cancelled"
    # A failed job that breaks a bound cannot be made claimable again; a bulk retry passes
    # over the ones the migration marked (failed and cancelled alike) and retries the rest.
    with pytest.raises(InvalidPayload, match="jobs_bound_payload"):
        app.sync_client.retry_job(huge)
    marked = app.get_job(gone)
    assert marked is not None and marked.status == JobStatus.CANCELLED
    assert (marked.last_error or "").startswith("InvalidPayload: this job breaks the bound")
    retried = app.sync_client.retry_jobs(JobFilter(), ["failed", "cancelled"])
    assert (retried.retried, retried.skipped) == (1, 6)
    assert app.sync_client.cancel_or_request(fine) == "cancelled"
    odd = [far, endless, deep, huge, gone, running]

    runner = CliRunner()
    where = ["--dsn", app.dsn, "--schema", s]
    listed = runner.invoke(cli_main, ["jobs", "list", *where], terminal_width=200)
    assert listed.exit_code == 0, (listed.output, listed.exception)
    assert "33715" in listed.output and "infinity" in listed.output
    as_json = runner.invoke(cli_main, ["jobs", "list", "--json", *where])
    assert as_json.exit_code == 0, (as_json.output, as_json.exception)
    found = {row["id"]: row for row in json.loads(as_json.output)}
    assert found[far]["run_at"].startswith("33715") and found[endless]["run_at"] == "infinity"
    assert found[endless]["expires_at"] == "-infinity"
    assert isinstance(found[deep]["payload"], str) and found[deep]["payload"].startswith('{"v"')
    assert found[huge]["payload"] == '{"n": 1' + "0" * 5000 + "}"
    assert found[fine]["payload"] == {"n": 1}
    for job_id in odd:
        for extra in ([], ["--json"]):
            shown = runner.invoke(cli_main, ["jobs", "show", str(job_id), *extra, *where])
            assert shown.exit_code == 0, (job_id, shown.output, shown.exception)
            assert str(job_id) in shown.output
        job = app.get_job(job_id)
        assert job is not None and job.status in (JobStatus.FAILED, JobStatus.CANCELLED)

    for command in (["status"], ["status", "--json"], ["workers"]):
        result = runner.invoke(cli_main, [*command, *where])
        assert result.exit_code == 0, (command, result.output, result.exception)

    with serving(app) as base:
        browser = Browser(base)
        assert browser.log_in().status == 200
        assert browser.get("/api/queues").status == 200
        page = browser.get("/jobs")
        assert page.status == 200 and "33715" in page.text, page
        for job_id in odd:
            one = browser.get(f"/jobs/{job_id}")
            assert one.status == 200, one
            api = browser.get(f"/api/jobs/{job_id}")
            assert api.status == 200 and json.loads(api.text)["id"] == job_id
        page = browser.get(f"/jobs/{huge}")
        refused = browser.post(f"/jobs/{huge}/retry", {"csrf": page.csrf()})
        assert refused.status == 200 and "breaks a bound" in refused.text, refused
        api_list = browser.get("/api/jobs")
        assert api_list.status == 200
        assert {j["id"] for j in json.loads(api_list.text)["jobs"]} == {*odd, fine}
