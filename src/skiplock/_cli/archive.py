"""``skiplock archive``: how the archive of finished jobs stands (its size, its oldest job,
its partitions), and ``skiplock archive partition``, which turns it into daily partitions
(docs/design.md, "An archive that stays healthy")."""

from __future__ import annotations

from typing import Any

import click

from skiplock._cli.common import dsn_option, emit_json, json_option, open_app, schema_option
from skiplock._db.store_sync import ARCHIVE_PARTITIONS_AHEAD
from skiplock._doctor.findings import duration


def describe(health: dict[str, Any]) -> str:
    """The archive in a line or two of words."""
    layout = (
        f"partitioned by day ({health['partitions']} partitions, the last ending "
        f"{duration(health['ahead_seconds'] or 0)} from now)"
        if health["partitioned"]
        else "one table (not partitioned)"
    )
    oldest = health["oldest_seconds"]
    text = (
        f"archive: {layout}; about {health['rows_estimate']:,} jobs, "
        f"{health['bytes'] / 1e6:,.1f} MB; "
        + (f"oldest finished {duration(oldest)} ago" if oldest is not None else "empty")
    )
    if health["default_rows"]:
        text += (
            f"; {health['default_rows']:,} jobs in the default partition (no daily partition "
            "was made for their day: is a worker running?)"
        )
    return text


@click.group(invoke_without_command=True)
@dsn_option
@schema_option
@json_option
@click.pass_context
def command(ctx: click.Context, dsn: str | None, schema: str, as_json: bool) -> None:
    """The archive of finished jobs (completion='archive'): its size, oldest job and layout."""
    ctx.obj = (dsn, schema)
    if ctx.invoked_subcommand is not None:
        return
    with open_app(dsn, schema) as app:
        health = app.sync_client.archive_health()
    if as_json:
        emit_json(health)
    else:
        click.echo(describe(health))


command.name = "archive"


@command.command()
@click.option(
    "--ahead",
    type=click.IntRange(min=1),
    default=ARCHIVE_PARTITIONS_AHEAD,
    show_default=True,
    help="Days of partitions made ahead (the maintenance leader keeps them so).",
)
@click.pass_obj
def partition(obj: tuple[str | None, str], ahead: int) -> None:
    """Turn the archive into daily partitions on finished_at: its retention then drops whole
    days, with no vacuum to follow.  The jobs archived so far stay in the partition
    jobs_archive_legacy, dropped once its last day is past the retention.  Run it as the
    schema's owner; archiving waits only for catalog changes, not for a scan."""
    dsn, schema = obj
    with open_app(dsn, schema) as app:
        cutoff = app.sync_client.archive_partition(ahead)
        health = app.sync_client.archive_health()
    click.echo(
        f"archive partitioned: jobs finished before {cutoff:%Y-%m-%d %H:%M %Z} stay in "
        "jobs_archive_legacy, later ones go to daily partitions"
    )
    click.echo(describe(health))
