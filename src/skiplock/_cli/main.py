"""The ``skiplock`` command line.  Every option can also be set by a ``SKIPLOCK_*`` variable."""

from __future__ import annotations

import io
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

import click

from skiplock._cli import admin, roles
from skiplock._cli import archive as archive_cli
from skiplock._cli import dashboard as dashboard_cli
from skiplock._cli import jobs as job_actions_cli
from skiplock._cli import status as status_cli
from skiplock._cli import worker as worker_cli
from skiplock._cli.common import dsn_option, open_app, schema_option
from skiplock._db.bounds import check_schema_name
from skiplock._db.migration_lock import LOCK_TIMEOUT as MIGRATE_LOCK_TIMEOUT
from skiplock._db.migration_lock import LOCK_WAIT as MIGRATE_LOCK_WAIT
from skiplock._db.migrations import all_migrations, render_sql
from skiplock._doctor import command as doctor
from skiplock.errors import SkiplockError
from skiplock.observability import _exporter as metrics_exporter


class SkiplockGroup(click.Group):
    """Turns skiplock errors into one clear line and exit status 1; every error, click's usage
    errors included, is printed with the same ``error:`` prefix."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SkiplockError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(1)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as exc:
            shown = io.StringIO()
            exc.show(shown)
            text = re.sub(r"^Error: ", "error: ", shown.getvalue(), count=1, flags=re.M)
            click.echo(text, err=True, nl=False)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=SkiplockGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="skiplock")
def main() -> None:
    """skiplock: a PostgreSQL job queue built on FOR UPDATE SKIP LOCKED.

    Every command takes -h/--help. Shell completion: see docs/operations.md.
    """


admin.register(main)
for extra in (
    status_cli.status,
    status_cli.workers,
    doctor.command,
    roles.command,
    worker_cli.command,
    job_actions_cli.retry,
    job_actions_cli.cancel,
    dashboard_cli.command,
    metrics_exporter.command,
    archive_cli.command,
):
    main.add_command(extra)


def refuse_nan(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """click's FloatRange lets NaN through (every comparison with it is false)."""
    if math.isnan(value):
        raise click.BadParameter("must be a number of seconds, not nan")
    return value


@main.command()
@dsn_option
@schema_option
@click.option(
    "--sql",
    "print_sql",
    is_flag=True,
    help="Print the SQL of the migrations the schema lacks, for a DBA, instead.",
)
@click.option(
    "--from",
    "from_version",
    type=click.IntRange(1),
    metavar="N",
    help="With --sql: the migrations numbered N and later, without asking the database.",
)
@click.option(
    "--lock-wait",
    type=click.FloatRange(0, 86400, min_open=True),
    callback=refuse_nan,
    default=MIGRATE_LOCK_WAIT,
    show_default=True,
    metavar="SECONDS",
    help="Wait at most this long for another migrator (or a session holding its lock); "
    "it says who holds the lock meanwhile.",
)
@click.option(
    "--lock-timeout",
    type=click.FloatRange(0, 86400, min_open=True),
    callback=refuse_nan,
    default=MIGRATE_LOCK_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Let a migration wait at most this long for a lock on one of skiplock's tables "
    "(a long transaction on the jobs table), then fail, nothing applied.",
)
def migrate(
    dsn: str | None,
    schema: str,
    print_sql: bool,
    from_version: int | None,
    lock_wait: float,
    lock_timeout: float,
) -> None:
    """Create or upgrade skiplock's tables (safe to run from several processes at once)."""
    schema = check_schema_name(schema)
    if from_version is not None:
        latest = all_migrations()[-1].version
        if not print_sql:
            raise click.UsageError("--from goes with --sql")
        if from_version > latest:
            raise click.BadParameter(f"the latest migration is {latest:04d}", param_hint="--from")
    if print_sql:
        if from_version is not None:
            versions = [m.version for m in all_migrations() if m.version >= from_version]
        else:
            with open_app(dsn, schema) as app:
                versions = app.sync_client.pending_migrations()
        if versions:
            click.echo(render_sql(schema, versions), nl=False)
        else:
            click.echo(f"-- schema {schema} is up to date: no migration to run")
        return
    with open_app(dsn, schema) as app:
        applied = app.migrate(lock_wait=lock_wait, lock_timeout=lock_timeout)
    if applied:
        click.echo(
            f"applied migrations {', '.join(f'{v:04d}' for v in applied)} to schema {schema}"
        )
    else:
        click.echo(f"schema {schema} is up to date")


@main.command()
@dsn_option
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=8,
    show_default=True,
    help="Part 1 compares 1, 2, 4 ... up to this many workers; part 2 runs this many.",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 100_000),
    help="Jobs for part 2 (default 2000, with --quick 200).",
)
@click.option("--quick", is_flag=True, help="Small sizes: the whole demo in a few seconds (CI).")
@click.option("--json", "as_json", is_flag=True, help="Print only the results, as JSON.")
@click.option("--keep", is_flag=True, help="Keep the demo's schema instead of dropping it.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True),
    help="Also draw claims/s against workers to this PNG (needs skiplock[plot]).",
)
def demo(
    dsn: str | None,
    workers: int,
    jobs: int | None,
    quick: bool,
    as_json: bool,
    keep: bool,
    plot: str | None,
) -> None:
    """Show the three dequeue patterns side by side, then skiplock at work with failing tasks
    and killed workers, on a schema of its own (dropped at the end)."""
    from skiplock._demo.command import run_demo

    run_demo(dsn, jobs=jobs, workers=workers, quick=quick, as_json=as_json, keep=keep, plot=plot)
