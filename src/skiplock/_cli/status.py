"""``skiplock status``: jobs per queue and state, once or (``--watch``) again and again; and
``skiplock workers``: the workers that run them."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click
from rich.live import Live
from rich.table import Table

from skiplock._cli.common import (
    console,
    dsn_option,
    emit_json,
    json_option,
    open_app,
    read_dsn_option,
    read_staleness,
    schema_option,
)
from skiplock._db.presence import SILENT_AFTER
from skiplock._runtime.queue_settings import describe_settings
from skiplock.app import App


@click.command()
@dsn_option
@read_dsn_option
@schema_option
@json_option
@click.option(
    "--watch",
    type=click.FloatRange(min=0.2),
    metavar="SECONDS",
    help="Show it again every SECONDS until Ctrl-C: redrawn in place on a terminal, else one "
    "table (or, with --json, one line of JSON) each time.",
)
def status(
    dsn: str | None, read_dsn: str | None, schema: str, as_json: bool, watch: float | None
) -> None:
    """Jobs per queue and state, the oldest due job's age, and last minute's throughput.

    With --read-dsn (a standby) it reads there and says how far behind the primary it is."""
    with open_app(dsn, schema, read_dsn) as app:
        if watch is not None:
            with stop_requested() as stopped:
                watch_status(app, schema, watch, as_json, stopped)
            return
        rows = app.read_sync_client.queue_status()
        stale = read_staleness(app)
    if as_json:
        emit_json(rows)
        if stale is not None:
            click.echo(stale, err=True)
        return
    console().print(status_table(rows, schema, stale))


@contextmanager
def stop_requested() -> Iterator[Callable[[], bool]]:
    """Ctrl-C (SIGINT) or SIGTERM asks a watch to stop between two reads, not inside one: a
    KeyboardInterrupt raised in the middle of the driver's or the pool's code may leave a query
    running on a pooled connection, or the pool's lock held, so that closing it never returns.
    A second one interrupts at once (a read that waits on a lock, a server that went away)."""
    asked: list[int] = []

    def ask(signum: int, _frame: object) -> None:
        if asked:
            raise KeyboardInterrupt
        asked.append(signum)

    previous = {sig: signal.signal(sig, ask) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: bool(asked)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def sleep_unless(stopped: Callable[[], bool], seconds: float) -> bool:
    """Sleep ``seconds`` in steps of at most 0.1 s; False as soon as a stop was asked for."""
    deadline = time.monotonic() + seconds
    while not stopped():
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(left, 0.1))
    return False


def watch_status(
    app: App, schema: str, every: float, as_json: bool, stopped: Callable[[], bool]
) -> None:
    """``status --watch``: until ``stopped()``."""
    out = console()
    reader = app.read_sync_client

    def table() -> Table:
        return status_table(reader.queue_status(), schema, read_staleness(app))

    if out.is_terminal and not as_json:
        with Live(table(), console=out) as live:
            while sleep_unless(stopped, every):
                live.update(table())
        return
    while True:
        rows = reader.queue_status()
        stale = read_staleness(app)
        if as_json:
            line = {"at": datetime.now(UTC).isoformat(), "queues": rows}
            click.echo(json.dumps(line | ({"read": stale} if stale is not None else {})))
        else:
            out.print(status_table(rows, schema, stale))
        sys.stdout.flush()
        if not sleep_unless(stopped, every):
            return


def status_table(rows: list[dict[str, Any]], schema: str, stale: str | None = None) -> Table:
    estimated = any(row["finished_estimated"] for row in rows)
    caption = f"at {datetime.now().astimezone():%H:%M:%S}"
    if stale is not None:
        caption += f", {stale}"
    if estimated:
        caption += "; ~ failed, done and cancelled estimated from a sample of the jobs table"
    table = Table(title=f"skiplock queues (schema {schema})", caption=caption)
    columns = ["queue", "pending", "scheduled", "waiting", "running", "failed", "done", "cancelled"]
    for column in [*columns, "oldest due", "finished/min", "workers", "settings"]:
        table.add_column(column, justify="left" if column in ("queue", "settings") else "right")
    sampled = ("failed", "done", "cancelled") if estimated else ()
    for row in rows:
        age = row["oldest_pending_seconds"]
        table.add_row(
            *(f"~{row[c]}" if c in sampled else str(row[c]) for c in columns),
            "-" if age is None else f"{age:.1f}s",
            str(row["finished_last_minute"]),
            str(row["workers"]) if row["workers"] or not row["pending"] else "[red]0[/red]",
            describe_settings(row),
        )
    return table


@click.command()
@dsn_option
@read_dsn_option
@schema_option
@json_option
def workers(dsn: str | None, read_dsn: str | None, schema: str, as_json: bool) -> None:
    """The running workers: host, pid, queues, jobs running and finished, when last seen.

    A worker reports itself every few seconds and removes itself when it stops; one that has
    not reported for a while (killed, its host lost) is shown as silent until it is forgotten
    an hour later.
    """
    with open_app(dsn, schema, read_dsn) as app:
        rows = app.read_sync_client.list_workers()
        stale = read_staleness(app)
    if as_json:
        emit_json(rows)
    elif not rows:
        console().print(f"no worker has reported itself in schema {schema!r}")
    else:
        console().print(workers_table(rows, schema))
    if stale is not None:
        click.echo(stale, err=True)


def workers_table(rows: list[dict[str, Any]], schema: str) -> Table:
    table = Table(
        title=f"skiplock workers (schema {schema})",
        caption=f"silent: not seen for over {SILENT_AFTER:g}s",
    )
    for column in ["worker", "queues", "model", "concurrency", "running", "finished", "up", "seen"]:
        table.add_column(
            column, justify="left" if column in ("worker", "queues", "model") else "right"
        )
    for row in rows:
        seen = f"{row['seen_ago']:.0f}s ago" + (" (silent)" if row["silent"] else "")
        table.add_row(
            row["id"],
            ",".join(row["queues"]),
            row["model"],
            str(row["concurrency"]),
            str(row["running"]),
            str(row["finished"]),
            duration(row["up_seconds"]),
            f"[red]{seen}[/red]" if row["silent"] else seen,
        )
    return table


def duration(elapsed: float) -> str:
    """Seconds as ``3d 4h``, ``2h 5m``, ``4m 10s``, ``12s``."""
    seconds = max(0, int(elapsed))
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds}s" if minutes else f"{seconds}s"
