"""Deleting finished jobs: ``skiplock prune`` by retention (what workers do every minute)."""

from __future__ import annotations

import click

from skiplock._cli.common import dsn_option, emit_json, json_option, open_app, schema_option
from skiplock.app import DEFAULT_RETENTION


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
