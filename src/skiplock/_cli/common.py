"""What the commands of the ``skiplock`` CLI share: the --dsn, --schema and --json options, the
App a command opens, and the output (tables for people, ``--json`` for scripts).

Exit status: 0 when the command did what it says, 3 when it was valid but changed nothing (no
such job, or a job in the wrong state), 1 on an error (printed as one ``error:`` line), 2 on a
usage error.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click
from rich.console import Console

from skiplock._db.connections import READ_ENV_VAR
from skiplock.app import App
from skiplock.job import Job, JobStatus

NOT_CHANGED = 3
PIPE_WIDTH = 200  # columns of rich output without a terminal

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


def when(value: datetime | str) -> str:
    """A time to the second; one Python cannot hold (a row from before the table's bounds)
    comes as PostgreSQL's text, shown as it is."""
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else value


def job_dict(job: Job) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in dataclasses.asdict(job).items()}


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, default=_jsonable, indent=2))


def plural(n: int, noun: str) -> str:
    """``1 job``, ``2 jobs``, ``1,000 jobs``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
