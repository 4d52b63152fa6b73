"""``skiplock status``: jobs per queue and state, once or (``--watch``) again and again."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click
from rich.live import Live
from rich.table import Table

from .admin import console, dsn_option, emit_json, json_option, open_app, schema_option
from .app import App
from .queue_settings import describe_settings


@click.command()
@dsn_option
@schema_option
@json_option
@click.option(
    "--watch",
    type=click.FloatRange(min=0.2),
    metavar="SECONDS",
    help="Show it again every SECONDS until Ctrl-C: redrawn in place on a terminal, else one "
    "table (or, with --json, one line of JSON) each time.",
)
def status(dsn: str | None, schema: str, as_json: bool, watch: float | None) -> None:
    """Jobs per queue and state, the oldest due job's age, and last minute's throughput."""
    with open_app(dsn, schema) as app:
        if watch is not None:
            with contextlib.suppress(KeyboardInterrupt):
                watch_status(app, schema, watch, as_json)
            return
        rows = app.sync_client.queue_status()
    if as_json:
        emit_json(rows)
        return
    console().print(status_table(rows, schema))


def watch_status(app: App, schema: str, every: float, as_json: bool) -> None:
    """``status --watch``: until interrupted."""
    out = console()
    if out.is_terminal and not as_json:
        with Live(status_table(app.sync_client.queue_status(), schema), console=out) as live:
            while True:
                time.sleep(every)
                live.update(status_table(app.sync_client.queue_status(), schema))
    while True:
        rows = app.sync_client.queue_status()
        if as_json:
            click.echo(json.dumps({"at": datetime.now(UTC).isoformat(), "queues": rows}))
        else:
            out.print(status_table(rows, schema))
        sys.stdout.flush()
        time.sleep(every)


def status_table(rows: list[dict[str, Any]], schema: str) -> Table:
    table = Table(
        title=f"skiplock queues (schema {schema})",
        caption=f"at {datetime.now().astimezone():%H:%M:%S}",
    )
    columns = ["queue", "pending", "scheduled", "running", "failed", "done", "cancelled"]
    for column in [*columns, "oldest due", "finished/min", "settings"]:
        table.add_column(column, justify="left" if column in ("queue", "settings") else "right")
    for row in rows:
        age = row["oldest_pending_seconds"]
        table.add_row(
            *(str(row[c]) for c in columns),
            "-" if age is None else f"{age:.1f}s",
            str(row["finished_last_minute"]),
            describe_settings(row),
        )
    return table
