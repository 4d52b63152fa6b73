"""The ``skiplock`` command line.  Every option can also be set by a ``SKIPLOCK_*`` variable."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
from typing import Any

import click

from .app import App
from .errors import SkiplockError
from .migrations import render_sql
from .payload import check_schema_name
from .worker import Worker

dsn_option = click.option(
    "--dsn",
    envvar="SKIPLOCK_DATABASE_URL",
    help="PostgreSQL URL (default: $SKIPLOCK_DATABASE_URL, $DATABASE_URL, else embedded).",
)
schema_option = click.option(
    "--schema",
    envvar="SKIPLOCK_SCHEMA",
    default="skiplock",
    show_default=True,
    help="Schema holding skiplock's tables.",
)


class SkiplockGroup(click.Group):
    """Turns skiplock errors into one clear line and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SkiplockError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=SkiplockGroup)
@click.version_option(package_name="skiplock")
def main() -> None:
    """skiplock: a PostgreSQL job queue built on FOR UPDATE SKIP LOCKED."""


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (the current directory is importable)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"expected module:attribute, got {spec!r}", param_hint="APP")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="APP") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{spec!r} is not a skiplock.App", param_hint="APP")
    return app


@main.command()
@dsn_option
@schema_option
@click.option(
    "--sql", "print_sql", is_flag=True, help="Print the SQL for a DBA instead of running it."
)
def migrate(dsn: str | None, schema: str, print_sql: bool) -> None:
    """Create or upgrade skiplock's tables (safe to run from several processes at once)."""
    if print_sql:
        click.echo(render_sql(check_schema_name(schema)), nl=False)
        return
    app = App(dsn, schema)
    try:
        applied = app.migrate()
    finally:
        app.close()
    if applied:
        click.echo(
            f"applied migrations {', '.join(f'{v:04d}' for v in applied)} to schema {schema}"
        )
    else:
        click.echo(f"schema {schema} is up to date")


@main.command()
@click.argument("app_spec", metavar="APP")
@dsn_option
@click.option(
    "--queues", envvar="SKIPLOCK_QUEUES", help="Comma-separated queues (default: all of the app's)."
)
@click.option(
    "--concurrency",
    envvar="SKIPLOCK_CONCURRENCY",
    type=click.IntRange(1),
    default=10,
    show_default=True,
)
@click.option(
    "--model",
    envvar="SKIPLOCK_MODEL",
    type=click.Choice(["lease", "held"]),
    help="Force one worker model for every task.",
)
@click.option(
    "--lease",
    "lease_seconds",
    envvar="SKIPLOCK_LEASE",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Lease length in seconds.",
)
@click.option(
    "--poll-interval",
    envvar="SKIPLOCK_POLL_INTERVAL",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
)
@click.option(
    "--burst", is_flag=True, envvar="SKIPLOCK_BURST", help="Run what is due, then exit 0."
)
@click.option("--log-level", envvar="SKIPLOCK_LOG_LEVEL", default="INFO", show_default=True)
def worker(
    app_spec: str,
    dsn: str | None,
    queues: str | None,
    concurrency: int,
    model: str | None,
    lease_seconds: float,
    poll_interval: float,
    burst: bool,
    log_level: str,
) -> None:
    """Run the tasks of APP (module:attribute) until stopped (SIGTERM/SIGINT)."""
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    app = load_app(app_spec)
    if dsn:
        app.use_dsn(dsn)
    runner = Worker(
        app,
        queues=[q.strip() for q in queues.split(",") if q.strip()] if queues else None,
        concurrency=concurrency,
        model=model,  # type: ignore[arg-type]
        lease_seconds=lease_seconds,
        poll_interval=poll_interval,
        burst=burst,
    )
    asyncio.run(_run_worker(runner))


async def _run_worker(runner: Worker) -> None:
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            logging.getLogger("skiplock.worker").info(
                "stopping: finishing running jobs (signal again to exit now)"
            )
            runner.stop()
        else:
            os._exit(130)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await runner.run()


@main.command()
@dsn_option
@click.option("--jobs", type=click.IntRange(1), default=300, show_default=True)
@click.option("--workers", type=click.IntRange(1), default=4, show_default=True)
@click.option("--keep", is_flag=True, help="Keep the demo's schema instead of dropping it.")
def demo(dsn: str | None, jobs: int, workers: int, keep: bool) -> None:
    """Enqueue jobs, run workers on them, and show what happened."""
    from .demo import run_demo

    run_demo(dsn, jobs=jobs, workers=workers, keep=keep)
