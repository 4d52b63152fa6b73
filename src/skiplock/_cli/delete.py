"""Deleting finished jobs: ``skiplock delete --all`` those a filter selects (as the dashboard's
bulk delete does), ``skiplock prune`` those past their retention (what workers do every minute).

``delete`` counts the matching jobs first and asks before deleting them, unless ``--yes``;
``--dry-run`` only counts; without a terminal to ask on, ``--yes`` is required.  It never
deletes an unfinished job, nor a failed or cancelled one that a waiting job depends on (it
would count as done and let that job run).  Exit status as in :mod:`skiplock._cli.common` (3:
nothing matched or nothing was deleted).
"""

from __future__ import annotations

import click

from skiplock._cli.common import (
    NOT_CHANGED,
    dsn_option,
    emit_json,
    json_option,
    open_app,
    plural,
    schema_option,
)
from skiplock._cli.jobs import confirmed
from skiplock.app import DEFAULT_RETENTION
from skiplock.bulk import FINISHED, JobFilter

SECONDS = click.FloatRange(min=0, min_open=True)


@click.command()
@dsn_option
@schema_option
@json_option
@click.option(
    "--all",
    "all_matching",
    is_flag=True,
    help="Every finished job matching the filters (required: what to delete is never implied).",
)
@click.option("--queue", help="Only jobs of this queue.")
@click.option("--task", help="Only jobs of this task.")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in FINISHED]),
    help="Only jobs that finished so (repeatable; default: done, failed and cancelled).",
)
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Only jobs that finished at least SECONDS ago.",
)
@click.option(
    "--finished-within",
    type=SECONDS,
    metavar="SECONDS",
    help="Only jobs that finished in the last SECONDS.",
)
@click.option("--dry-run", is_flag=True, help="Count the matching jobs, delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask first.")
def delete(
    dsn: str | None,
    schema: str,
    as_json: bool,
    all_matching: bool,
    queue: str | None,
    task: str | None,
    statuses: tuple[str, ...],
    older_than: float | None,
    finished_within: float | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Delete every finished job that matches, in batches of short transactions (e.g. the failed
    jobs of a queue, a week old: --all --queue mail --status failed --older-than 604800)."""
    if not all_matching:
        raise click.UsageError("give --all (with --queue, --task, --status ... to narrow it)")
    try:
        jobs = JobFilter(queue, task, finished_within, older_than)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    chosen = list(statuses) or [s.value for s in FINISHED]
    with open_app(dsn, schema) as app:
        flags = {"dry_run": dry_run, "yes": yes, "as_json": as_json}
        if not confirmed(app, jobs, chosen, "Delete {jobs}", **flags):
            return
        result = app.sync_client.delete_jobs(jobs, chosen)
    if as_json:
        emit_json({"deleted": result.deleted, "skipped": result.skipped})
    else:
        click.echo(f"deleted {plural(result.deleted, 'finished job')}{jobs.describe()}")
        if result.skipped:
            click.echo(
                f"{result.skipped:,} kept: a waiting job depends on them (deleted, they would "
                "count as done and let it run)"
            )
    if not result.deleted:
        raise SystemExit(NOT_CHANGED)


@click.command()
@dsn_option
@schema_option
@json_option
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    help="Seconds; default: 1 day for done and cancelled, 7 days for failed.",
)
@click.option(
    "--archive-older-than",
    type=click.FloatRange(min=0),
    help="Seconds; archived jobs older are deleted (default: 30 days).",
)
def prune(
    dsn: str | None,
    schema: str,
    as_json: bool,
    older_than: float | None,
    archive_older_than: float | None,
) -> None:
    """Delete finished jobs past their retention, and archived ones past the archive's
    (workers also do this every minute; a partitioned archive drops whole days)."""
    retention = dict(DEFAULT_RETENTION)
    if older_than is not None:
        retention = {s: older_than if s != "archive" else v for s, v in retention.items()}
    if archive_older_than is not None:
        retention["archive"] = archive_older_than
    with open_app(dsn, schema) as app:
        pruned = app.sync_client.prune(retention)
    if as_json:
        emit_json(pruned)
    else:
        click.echo(", ".join(f"{status}: {n} deleted" for status, n in pruned.items()))
