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


@contextmanager
def open_app(dsn: str | None, schema: str) -> Iterator[App]:
    app = App(dsn, schema)
    try:
        yield app
    finally:
        app.close()


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
