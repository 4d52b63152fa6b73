"""The queue and key controls: ``skiplock pause``, ``resume``, ``limit``, ``rate``, ``aging``
and ``key-limit``, each one statement of the client that every worker follows within its poll
interval."""

from __future__ import annotations

import click

from skiplock._cli.common import dsn_option, open_app, plural, schema_option
from skiplock._db.bounds import (
    AGING_STEP_MAX,
    INT_MAX,
    check_aging_step,
    check_key,
    check_queue_name,
)
from skiplock._rate_limit import describe, parse_concurrency_limit, parse_rate
from skiplock.errors import ConfigurationError


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


@click.command()
@click.argument("queue")
@click.argument("step_text", metavar="STEP")
@dsn_option
@schema_option
def aging(queue: str, step_text: str, dsn: str | None, schema: str) -> None:
    """Age QUEUE's pending jobs: one priority level better per STEP seconds they have waited,
    up to the best priority pending in the queue ('none': strict priority, the default)."""
    check_queue_name(queue)
    step: float | None = None
    if step_text.lower() != "none":
        try:
            step = check_aging_step(float(step_text))
        except ValueError:
            raise click.BadParameter(
                f"must be a number of seconds > 0 and <= {AGING_STEP_MAX:g}, or 'none'",
                param_hint="STEP",
            ) from None
    with open_app(dsn, schema) as app:
        app.sync_client.set_aging(queue, step)
    if step is None:
        click.echo(f"queue {queue}: no aging, priority is strict")
    else:
        click.echo(f"queue {queue}: pending jobs gain a priority level every {step:g}s waited")


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
