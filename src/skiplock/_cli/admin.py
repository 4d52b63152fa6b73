"""Administration commands of the ``skiplock`` CLI: tables for people, ``--json`` for scripts.

Exit status: 0 when the command did what it says, 3 when it was valid but changed nothing (no
such job, or a job in the wrong state), 1 on an error (printed as one ``error:`` line), 2 on a
usage error.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from skiplock._db.bounds import BIGINT_MAX, INT_MAX, check_key, check_queue_name, check_schema_name
from skiplock._db.connections import READ_ENV_VAR
from skiplock._db.enqueue import EnqueueOptions, NewJob, NewJobs, build_job
from skiplock._rate_limit import describe, parse_concurrency_limit, parse_rate
from skiplock.app import DEFAULT_RETENTION, App
from skiplock.errors import ConfigurationError, InvalidArguments, InvalidName, InvalidPayload
from skiplock.job import Enqueued, Job, JobStatus

NOT_CHANGED = 3
PIPE_WIDTH = 200  # columns of rich output without a terminal
DEFAULT_MAX_ATTEMPTS = 5  # App.task's default, for --raw

dsn_option = click.option(
    "--dsn",
    envvar="SKIPLOCK_DATABASE_URL",
    show_envvar=True,
    help="PostgreSQL URL (default: $SKIPLOCK_DATABASE_URL, $DATABASE_URL, else embedded).",
)
schema_option = click.option(
    "--schema",
    envvar="SKIPLOCK_SCHEMA",
    show_envvar=True,
    default="skiplock",
    show_default=True,
    help="Schema holding skiplock's tables.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
read_dsn_option = click.option(
    "--read-dsn",
    envvar=READ_ENV_VAR,
    show_envvar=True,
    help="A standby to read from, its lag shown (default: read from --dsn).",
)


@contextmanager
def open_app(dsn: str | None, schema: str, read_dsn: str | None = None) -> Iterator[App]:
    app = App(dsn, schema, read_dsn=read_dsn)
    try:
        yield app
    finally:
        app.close()


def describe_read_lag(lag: dict[str, Any]) -> str:
    """How stale reads from the read DSN are, in a sentence (see ``session_read_lag``)."""
    if not lag["standby"]:
        return "read from the read DSN, which is not a standby: current"
    seconds = lag["lag_seconds"]
    if seconds is None:
        text = "read from a standby that has replayed nothing since it started: staleness unknown"
    else:
        text = f"read from a standby {seconds:.1f}s behind the primary"
    if not lag["receiving"]:
        text += " (it receives no WAL now: it may be further behind)"
    return text


def read_staleness(app: App) -> str | None:
    """:func:`describe_read_lag` of the app's read DSN; None when it has none."""
    if app.read_dsn is None:
        return None
    return describe_read_lag(app.read_sync_client.read_lag())


def console(*, stderr: bool = False) -> Console:
    """Rich output; wide when piped, so that neither tables nor sentences are cut at 80 columns
    in logs and scripts."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else PIPE_WIDTH)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, JobStatus):
        return value.value
    return value


def _when(value: datetime | str) -> str:
    """A time to the second; one Python cannot hold (a row from before the table's bounds)
    comes as PostgreSQL's text, shown as it is."""
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else value


def job_dict(job: Job) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in dataclasses.asdict(job).items()}


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, default=_jsonable, indent=2))


def register(main: click.Group) -> None:
    """Add the administration commands to the ``skiplock`` group."""
    for command in (jobs, enqueue, pause, resume, limit, rate, key_limit, prune):
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
            _when(j.run_at), error,
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


def _json_option(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=option) from None


@click.command()
@click.argument("names", nargs=-1, metavar="APP TASK")
@dsn_option
@click.option(
    "--schema",
    envvar="SKIPLOCK_SCHEMA",
    default=None,
    help="Schema holding skiplock's tables (default: the APP's; with --raw, skiplock).",
)
@click.option(
    "--raw",
    is_flag=True,
    help="TASK alone, not checked against an app: for a task defined elsewhere (give --queue).",
)
@click.option("--payload", default="{}", show_default=True, help="The job's arguments as JSON.")
@click.option("--queue", help="Default: the task's queue.")
@click.option("--priority", type=int, help="Default: the task's priority (with --raw, 0).")
@click.option("--delay", type=click.FloatRange(min=0), help="Seconds before the job is due.")
@click.option(
    "--max-attempts",
    type=click.IntRange(1),
    help="Default: the task's max_attempts (with --raw, 5).",
)
@click.option("--entity-key", help="At most one running job per key.")
@click.option("--idempotency-key", help="At most one unfinished job per key.")
@click.option("--count", type=click.IntRange(1, 10_000_000), default=1, show_default=True)
@click.option("--meta", help="Job meta as a JSON object (not passed to the task).")
@click.option(
    "--depends-on",
    type=int,
    multiple=True,
    metavar="JOB_ID",
    help="Run only once this job is done (repeatable); cancelled if it fails.",
)
@click.option(
    "--expires",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds: a job not started by then is cancelled, never run.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the jobs made as JSON.")
def enqueue(
    names: tuple[str, ...],
    dsn: str | None,
    schema: str | None,
    raw: bool,
    payload: str,
    queue: str | None,
    priority: int | None,
    delay: float | None,
    max_attempts: int | None,
    entity_key: str | None,
    idempotency_key: str | None,
    count: int,
    meta: str | None,
    depends_on: tuple[int, ...],
    expires: float | None,
    as_json: bool,
) -> None:
    """Enqueue COUNT jobs of TASK, a task of APP (module:attribute, as for `skiplock worker`),
    with the same payload, on the task's queue and with its options unless given here.

    With --raw, TASK alone: a task this command cannot import (give --queue).
    """
    if len(names) != (1 if raw else 2):
        usage = "--raw TASK" if raw else "APP TASK (or --raw TASK)"
        raise click.UsageError(f"expected {usage}, got {len(names)} argument(s)")
    arguments = _json_option(payload, "--payload")
    meta_value = None if meta is None else _json_option(meta, "--meta")
    options = EnqueueOptions(
        queue,
        priority,
        None,
        delay,
        max_attempts,
        entity_key,
        idempotency_key,
        meta=meta_value,
        depends_on=depends_on,
        expires=expires,
    )
    if raw:
        task = names[0]
        if queue is None:
            raise click.UsageError("--raw needs --queue: the queue the task's workers serve")
        app = App(schema=check_schema_name(schema or "skiplock"))
        defaults = EnqueueOptions(queue, 0, max_attempts=DEFAULT_MAX_ATTEMPTS)
        build = partial(build_job, max_payload_bytes=app.max_payload_bytes)
        job = _built(lambda: build(task, arguments, defaults.merged(options)))
    else:
        from skiplock._app_loader import load_app

        app_spec, task = names
        app = load_app(app_spec)
        if schema is not None and schema != app.schema:
            raise click.BadParameter(
                f"{app_spec} uses schema {app.schema!r}; drop --schema or make them agree",
                param_hint="--schema",
            )
        if task not in app.tasks:
            raise click.BadParameter(
                f"no task {task!r} in {app_spec} (its tasks: {', '.join(sorted(app.tasks))}); "
                "--raw enqueues a task defined elsewhere",
                param_hint="TASK",
            )
        job = _built(lambda: app.build_job(task, arguments, options))
    if dsn:
        app.use_dsn(dsn)
    made: list[Enqueued] = []
    try:
        while len(made) < count:
            batch = min(10_000, count - len(made))
            made += app.sync_client.enqueue_batch(NewJobs.repeated(job, batch))
    except ValueError as exc:  # depends_on naming no job
        raise click.BadParameter(str(exc)) from None
    finally:
        app.close()
    if as_json:
        jobs = [{"id": e.id, "deduplicated": e.deduplicated} for e in made]
        emit_json({"task": task, "queue": job.queue, "jobs": jobs})
    else:
        new = sum(not e.deduplicated for e in made)
        said = f"enqueued {plural(new, 'job')} of {task} on queue {job.queue}"
        if new < count:  # the idempotency key named an unfinished job: no job was made
            said += (
                f"; {plural(count - new, 'enqueue')} found job {made[-1].id} unfinished with "
                f"idempotency key {idempotency_key!r} and returned it"
            )
        click.echo(said)


def _built(build: Callable[[], NewJob]) -> NewJob:
    """The job ``build`` makes, a bad option or payload as a usage error."""
    try:
        return build()
    except InvalidArguments as exc:
        raise click.BadParameter(str(exc), param_hint="--payload") from None
    except (ValueError, InvalidPayload, InvalidName) as exc:  # the payload, meta, queue, task
        raise click.BadParameter(str(exc)) from None


def plural(n: int, noun: str) -> str:
    """``1 job``, ``2 jobs``, ``1,000 jobs``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


@click.command()
@click.argument("queue")
@dsn_option
@schema_option
def pause(queue: str, dsn: str | None, schema: str) -> None:
    """Stop workers from claiming jobs of QUEUE (within one poll interval)."""
    check_queue_name(queue)
    with open_app(dsn, schema) as app:
        app.sync_client.set_paused(queue, True)
    click.echo(f"queue {queue} paused")


@click.command()
@click.argument("queue")
@dsn_option
@schema_option
def resume(queue: str, dsn: str | None, schema: str) -> None:
    """Let workers claim jobs of QUEUE again."""
    check_queue_name(queue)
    with open_app(dsn, schema) as app:
        app.sync_client.set_paused(queue, False)
    click.echo(f"queue {queue} resumed")


@click.command()
@click.argument("queue")
@click.argument("max_running")
@dsn_option
@schema_option
def limit(queue: str, max_running: str, dsn: str | None, schema: str) -> None:
    """Cap QUEUE's running jobs across all workers at MAX_RUNNING ('none' removes the cap)."""
    check_queue_name(queue)
    try:
        value = parse_concurrency_limit(max_running)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="MAX_RUNNING") from None
    with open_app(dsn, schema) as app:
        app.sync_client.set_concurrency_limit(queue, value)
    if value is None:
        click.echo(f"queue {queue}: no limit on running jobs")
    else:
        click.echo(f"queue {queue}: at most {plural(value, 'running job')}")


@click.command()
@click.argument("queue")
@click.argument("rate_text", metavar="RATE")
@dsn_option
@schema_option
def rate(queue: str, rate_text: str, dsn: str | None, schema: str) -> None:
    """Start at most RATE jobs of QUEUE across all workers: N/s, N/m, N/h, N/d or N/SECONDS
    (e.g. 100/m, 5/30); 'none' removes the limit."""
    check_queue_name(queue)
    try:
        parsed = parse_rate(rate_text)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="RATE") from None
    with open_app(dsn, schema) as app:
        if parsed is None:
            app.sync_client.set_rate_limit(queue, None)
        else:
            app.sync_client.set_rate_limit(queue, *parsed)
    click.echo(f"queue {queue}: {describe(*parsed) if parsed else 'no rate limit'}")


@click.command("key-limit")
@click.argument("key")
@click.option("--running", "max_running", help="At most this many of its jobs running ('none').")
@click.option("--rate", "rate_text", help="At most RATE starts: N/s, N/m, N/h, N/d, N/SECONDS.")
@dsn_option
@schema_option
def key_limit(
    key: str, max_running: str | None, rate_text: str | None, dsn: str | None, schema: str
) -> None:
    """Limit the jobs enqueued with limit_key=KEY, across every task, queue and worker; the
    options not given are no limit (neither: KEY has none)."""
    try:
        check_key(key, "KEY")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="KEY") from None
    running: int | None = None
    if max_running is not None and max_running.lower() != "none":
        try:
            running = int(max_running)
        except ValueError:
            running = 0
        if not 1 <= running <= INT_MAX:
            raise click.BadParameter(
                f"must be an integer from 1 to {INT_MAX} or 'none'", param_hint="--running"
            )
    try:
        parsed = parse_rate(rate_text) if rate_text is not None else None
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--rate") from None
    with open_app(dsn, schema) as app:
        rate_limit, period = parsed if parsed else (None, 1.0)
        app.sync_client.set_key_limit(key, concurrency=running, rate=rate_limit, period=period)
    parts = [f"at most {plural(running, 'running job')}"] if running else []
    if parsed:
        parts.append(describe(*parsed))
    click.echo(f"key {key}: {', '.join(parts) or 'no limits'}")


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
