"""``skiplock jobs list`` and ``skiplock jobs show``, and the registration of the
administration commands (:mod:`.enqueue`, :mod:`.queues`, :mod:`.delete`) in the group.

Exit status as in :mod:`skiplock._cli.common`.
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from skiplock._cli.common import (
    NOT_CHANGED,
    console,
    dsn_option,
    emit_json,
    job_dict,
    json_option,
    open_app,
    plural,
    read_dsn_option,
    read_staleness,
    schema_option,
    when,
)
from skiplock._cli.delete import delete, prune
from skiplock._cli.enqueue import enqueue
from skiplock._cli.queues import aging, key_limit, limit, pause, rate, resume
from skiplock._db.bounds import BIGINT_MAX
from skiplock.job import JobStatus


def register(main: click.Group) -> None:
    """Add the administration commands to the ``skiplock`` group."""
    for command in (jobs, enqueue, pause, resume, limit, rate, aging, key_limit, delete, prune):
        main.add_command(command)


@click.group()
def jobs() -> None:
    """List or show jobs."""


@jobs.command("list")
@dsn_option
@read_dsn_option
@schema_option
@json_option
@click.option("--queue")
@click.option("--status", "job_status", type=click.Choice([s.value for s in JobStatus]))
@click.option("--task")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option(
    "--before",
    type=click.IntRange(1, BIGINT_MAX),
    help="Only jobs with a smaller id (next page).",
)
def jobs_list(
    dsn: str | None,
    read_dsn: str | None,
    schema: str,
    as_json: bool,
    queue: str | None,
    job_status: str | None,
    task: str | None,
    limit: int,
    before: int | None,
) -> None:
    """The newest jobs matching the filters."""
    with open_app(dsn, schema, read_dsn) as app:
        found = app.read_sync_client.list_jobs(
            queue=queue, status=job_status, task=task, limit=limit, before=before
        )
        stale = read_staleness(app)
    if as_json:
        emit_json([job_dict(j) for j in found])
        if stale is not None:
            click.echo(stale, err=True)
        return
    table = Table(title=plural(len(found), "job"), caption=stale)
    for column in ("id", "queue", "task", "status", "attempts", "run_at", "last error"):
        table.add_column(column)
    for j in found:
        error = (j.last_error or "").splitlines()[0][:60] if j.last_error else ""
        table.add_row(
            str(j.id), j.queue, j.task, j.status.value, f"{j.attempts}/{j.max_attempts}",
            when(j.run_at), error,
        )  # fmt: skip
    console().print(table)


@jobs.command("show")
@click.argument("job_id", type=click.IntRange(1, BIGINT_MAX))
@dsn_option
@schema_option
@json_option
def jobs_show(job_id: int, dsn: str | None, schema: str, as_json: bool) -> None:
    """Everything about one job, including its attempts and its last error and traceback."""
    with open_app(dsn, schema) as app:
        job = app.get_job(job_id)
        waits_for = app.sync_client.waits_for(job_id) if job and job.status == "waiting" else []
        attempts = app.sync_client.attempts(job) if job else []
        progress = app.sync_client.progress(job) if job else None
    if job is None:
        click.echo(f"no job {job_id}", err=True)
        raise SystemExit(NOT_CHANGED)
    shown = job_dict(job)
    if waits_for:
        shown["waits_for"] = {str(dep): status for dep, status in waits_for}
    if as_json:
        emit_json({**shown, "progress": progress, "attempt_history": attempts})
        return
    for key, value in shown.items():
        if key != "last_error":
            text = json.dumps(value) if key in ("payload", "result", "meta", "waits_for") else value
            click.echo(f"{key:>16}: {text}")
    if progress is not None:
        status = f" {progress['status']}" if progress["status"] else ""
        click.echo(
            f"{'progress':>16}: {progress['fraction']:.0%}{status} (at {progress['updated_at']})"
        )
    for a in attempts:
        error = (a["error"] or "").strip().splitlines()
        click.echo(
            f"{'attempt ' + str(a['attempt']):>16}: {a['outcome']} by {a['worker'] or '-'}, "
            f"{a['started_at'] or '-'} .. {a['ended_at'] or '-'}"
            + (f": {error[-1]}" if error else "")
        )
    if job.last_error:
        click.echo(f"{'last_error':>16}:\n{job.last_error}")
