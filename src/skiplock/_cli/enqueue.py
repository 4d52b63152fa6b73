"""``skiplock enqueue``: jobs of an app's task (checked against it), or with --raw of a task
defined elsewhere."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import click

from skiplock._cli.common import dsn_option, emit_json, plural
from skiplock._db.bounds import check_schema_name
from skiplock._db.enqueue import EnqueueOptions, NewJob, NewJobs, build_job
from skiplock.app import App
from skiplock.errors import InvalidArguments, InvalidName, InvalidPayload
from skiplock.job import Enqueued

DEFAULT_MAX_ATTEMPTS = 5  # App.task's default, for --raw


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
