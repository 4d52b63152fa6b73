"""``skiplock retry`` and ``skiplock cancel``: one job by id, or every job matching filters.

``skiplock retry 42`` and ``skiplock cancel 42`` change one job.  With ``--all`` they change
every job matching ``--queue`` and ``--task`` (by default all queues and tasks), in batches of
short transactions (see :mod:`skiplock.bulk`): they count the jobs first and ask before changing
them, unless ``--yes``; ``--dry-run`` only counts.  Without a terminal to ask on, ``--yes`` is
required.  Exit status as in :mod:`skiplock._cli.common` (3: nothing matched or nothing changed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

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
from skiplock.app import App
from skiplock.bulk import JobFilter


def bulk_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options shared by the bulk forms of retry and cancel."""
    for option in reversed(
        [
            click.option(
                "--all",
                "all_matching",
                is_flag=True,
                help="Every job matching --queue and --task (default: every queue and task).",
            ),
            click.option("--queue", help="With --all: only jobs of this queue."),
            click.option("--task", help="With --all: only jobs of this task."),
            click.option("--dry-run", is_flag=True, help="With --all: count, change nothing."),
            click.option("--yes", "-y", is_flag=True, help="With --all: do not ask first."),
        ]
    ):
        command = option(command)
    return command


def one_or_all(
    verb: str, job_id: int | None, all_matching: bool, bulk_only: dict[str, Any]
) -> None:
    """A JOB_ID or --all, not both; the filters and bulk flags only with --all."""
    if job_id is not None and all_matching:
        raise click.UsageError("give a JOB_ID or --all, not both")
    if job_id is None and not all_matching:
        raise click.UsageError(f"give the JOB_ID to {verb}, or --all to {verb} every matching job")
    if job_id is not None:
        given = [f"--{name.replace('_', '-')}" for name, value in bulk_only.items() if value]
        if given:
            raise click.UsageError(f"{', '.join(given)}: only with --all")


def confirmed(
    app: App,
    jobs: JobFilter,
    statuses: list[str],
    question: str,
    *,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> bool:
    """Whether to go on with a bulk change of the matching jobs in ``statuses``: counted, then
    shown (--dry-run, and stop), asked about on a terminal, or taken as confirmed (--yes)."""
    counted = app.sync_client.count_matching(jobs, statuses)
    total = sum(counted.values())
    listed = ", ".join(f"{status}: {n:,}" for status, n in sorted(counted.items()))
    if dry_run:
        if as_json:
            emit_json({"matching": counted})
        else:
            click.echo(
                f"{plural(total, 'matching job')}{jobs.describe()}"
                + (f" ({listed})" if listed else "")
            )
        return False
    if not total:
        click.echo(f"no matching jobs{jobs.describe()}; nothing changed", err=True)
        raise SystemExit(NOT_CHANGED)
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(
                f"{plural(total, 'job')} match{'es' * (total == 1)} ({listed}); pass --yes to go "
                "on without a prompt"
            )
        click.confirm(
            f"{question.format(jobs=plural(total, 'job'))}{jobs.describe()} ({listed})?", abort=True
        )
    return True


@click.command()
@click.argument("job_id", type=int, required=False)
@dsn_option
@schema_option
@json_option
@bulk_options
@click.option("--cancelled", is_flag=True, help="With --all: retry cancelled jobs too.")
@click.option(
    "--finished-within",
    type=click.FloatRange(min=0, min_open=True),
    help="With --all: only jobs that failed (or were cancelled) in the last SECONDS.",
)
def retry(
    job_id: int | None,
    dsn: str | None,
    schema: str,
    as_json: bool,
    all_matching: bool,
    queue: str | None,
    task: str | None,
    dry_run: bool,
    yes: bool,
    cancelled: bool,
    finished_within: float | None,
) -> None:
    """Give a failed or cancelled job one more attempt now; with --all, every failed job that
    matches (e.g. after an outage: --all --queue mail --finished-within 3600)."""
    bulk = {"queue": queue, "task": task, "dry_run": dry_run, "yes": yes, "cancelled": cancelled}
    one_or_all("retry", job_id, all_matching, {**bulk, "finished_within": finished_within})
    with open_app(dsn, schema) as app:
        if job_id is not None:
            retried = app.retry_job(job_id)
            if as_json:
                emit_json({"job": job_id, "retried": retried})
            elif retried:
                click.echo(f"job {job_id} is pending again")
            elif app.get_job(job_id) is None:
                click.echo(f"no job {job_id}", err=True)
            else:
                click.echo(f"job {job_id} is not failed or cancelled; nothing to retry", err=True)
            if not retried:
                raise SystemExit(NOT_CHANGED)
            return
        jobs = JobFilter(queue, task, finished_within)
        statuses = ["failed", "cancelled"] if cancelled else ["failed"]
        flags = {"dry_run": dry_run, "yes": yes, "as_json": as_json}
        if not confirmed(app, jobs, statuses, "Retry {jobs}", **flags):
            return
        result = app.sync_client.retry_jobs(jobs, statuses)
    if as_json:
        emit_json({"retried": result.retried, "skipped": result.skipped})
    else:
        click.echo(f"retried {plural(result.retried, 'job')}{jobs.describe()}")
        if result.skipped:
            click.echo(
                f"{result.skipped:,} left as they were: an unfinished job holds their "
                "idempotency key (or a newer job with the same key was retried), or they break "
                "a bound of the jobs table (their last error says which)"
            )
    if not result.retried:
        raise SystemExit(NOT_CHANGED)


@click.command()
@click.argument("job_id", type=int, required=False)
@dsn_option
@schema_option
@json_option
@bulk_options
@click.option(
    "--running",
    is_flag=True,
    help="With --all: also ask the workers running matching jobs to cancel them.",
)
def cancel(
    job_id: int | None,
    dsn: str | None,
    schema: str,
    as_json: bool,
    all_matching: bool,
    queue: str | None,
    task: str | None,
    dry_run: bool,
    yes: bool,
    running: bool,
) -> None:
    """Cancel a job; a running leased job is asked to stop at its worker's next heartbeat.  With
    --all, every matching job that has not started (and with --running, the running ones too)."""
    bulk = {"queue": queue, "task": task, "dry_run": dry_run, "yes": yes, "running": running}
    one_or_all("cancel", job_id, all_matching, bulk)
    with open_app(dsn, schema) as app:
        if job_id is not None:
            cancel_one(app, job_id, as_json=as_json)
            return
        jobs = JobFilter(queue, task)
        statuses = ["scheduled", "pending", *(["running"] if running else [])]
        flags = {"dry_run": dry_run, "yes": yes, "as_json": as_json}
        if not confirmed(app, jobs, statuses, "Cancel {jobs}", **flags):
            return
        result = app.sync_client.cancel_jobs(jobs, running=running)
    if as_json:
        emit_json({"cancelled": result.cancelled, "requested": result.requested})
    else:
        click.echo(
            f"cancelled {plural(result.cancelled, 'job')}{jobs.describe()} that had not started"
        )
        if running:
            click.echo(
                f"asked the workers of {plural(result.requested, 'running job')} to cancel them"
            )
    if not result.cancelled and not result.requested:
        raise SystemExit(NOT_CHANGED)


def cancel_one(app: App, job_id: int, *, as_json: bool) -> None:
    result = app.sync_client.cancel_or_request(job_id)
    if as_json:
        emit_json({"job": job_id, "outcome": result})
    elif result == "unchanged" and app.get_job(job_id) is None:
        click.echo(f"no job {job_id}", err=True)
    elif result == "unchanged":
        click.echo(f"job {job_id} has finished; nothing to cancel", err=True)
    elif result == "held":
        click.echo(
            f"job {job_id} runs under a held row lock: asked its worker to cancel it (at once "
            "by NOTIFY; a worker that does not LISTEN reads the request within its poll "
            "interval)",
            err=True,
        )
    else:
        click.echo(f"job {job_id}: {'cancelled' if result == 'cancelled' else 'cancel requested'}")
    if result == "unchanged":
        raise SystemExit(NOT_CHANGED)
