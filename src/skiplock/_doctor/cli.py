"""The ``skiplock doctor`` command: its options (the thresholds, ``--retention``), the
findings as a table or as JSON, and the exit status (1 at or above ``--fail-on``)."""

from __future__ import annotations

import json
from dataclasses import asdict

import click
from rich.table import Table

from skiplock._cli.common import console as cli_console
from skiplock._cli.common import dsn_option, schema_option
from skiplock._db.bounds import check_schema_name
from skiplock._db.connections import resolve_dsn, worker_connections
from skiplock._doctor.findings import STATUS_ORDER, Finding, Thresholds, worst
from skiplock._doctor.runner import Doctor
from skiplock.app import DEFAULT_RETENTION


def _parse_retention(values: tuple[str, ...]) -> dict[str, float | None]:
    retention = dict(DEFAULT_RETENTION)
    for value in values:
        status, sep, seconds = value.partition("=")
        if not sep or status not in retention:
            raise click.BadParameter(
                f"expected STATUS=SECONDS|none with STATUS one of {sorted(retention)}, "
                f"got {value!r}",
                param_hint="--retention",
            )
        try:
            retention[status] = None if seconds.lower() == "none" else float(seconds)
        except ValueError:
            raise click.BadParameter(
                f"not a number of seconds: {seconds!r}", param_hint="--retention"
            ) from None
    return retention


def _print(findings: list[Finding], schema: str) -> None:
    console = cli_console()
    table = Table(title=f"skiplock doctor (schema {schema})", show_lines=True)
    table.add_column("check")
    table.add_column("status")
    table.add_column("finding")
    colours = {"ok": "green", "warn": "yellow", "fail": "red"}
    for f in findings:
        table.add_row(f.check, f"[{colours[f.status]}]{f.status}[/]", f.message)
    console.print(table)
    for f in findings:
        if f.status != "ok" and f.fix:
            console.print(f"[bold]{f.check}[/] fix: {f.fix}", highlight=False)


@click.command("doctor")
@dsn_option
@schema_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--transaction-age",
    type=click.FloatRange(min=0),
    default=Thresholds.transaction_seconds,
    show_default=True,
    help="Seconds a transaction may stay open before it is reported.",
)
@click.option(
    "--lease-grace",
    type=click.FloatRange(min=0),
    default=Thresholds.lease_grace,
    show_default=True,
    help="Seconds past its expiry a lease may go unreclaimed before it is reported.",
)
@click.option(
    "--retention",
    "retention",
    multiple=True,
    metavar="STATUS=SECONDS|none",
    help="The app's retention of finished jobs, if not the default (repeatable).",
)
@click.option(
    "--listen-timeout",
    type=click.FloatRange(min=0.05),
    default=Thresholds.listen_timeout,
    show_default=True,
    help="Seconds to wait for the LISTEN probe's notification.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=None,
    help="Worker processes in the fleet (all hosts): report the connection headroom they "
    "leave, at their most sessions each (see --concurrency, --model, --poll-only).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1),
    default=10,
    show_default=True,
    help="The workers' --concurrency (held-lock workers keep a connection per slot).",
)
@click.option(
    "--model",
    type=click.Choice(["lease", "held"]),
    default="lease",
    show_default=True,
    help="The workers' model.",
)
@click.option("--poll-only", is_flag=True, help="The workers run with --poll-only (no listener).")
@click.option(
    "--fail-on",
    type=click.Choice(["warn", "fail"]),
    default="warn",
    show_default=True,
    help="Exit 1 when a finding is at least this serious.",
)
def command(
    dsn: str | None,
    schema: str,
    as_json: bool,
    transaction_age: float,
    lease_grace: float,
    retention: tuple[str, ...],
    listen_timeout: float,
    workers: int | None,
    concurrency: int,
    model: str,
    poll_only: bool,
    fail_on: str,
) -> None:
    """Check a live database for what slows or stops the queue, and say how to fix it.

    Exits 0 when nothing needs action, 1 when a finding is at least --fail-on.
    """
    thresholds = Thresholds(
        transaction_seconds=transaction_age,
        lease_grace=lease_grace,
        retention=_parse_retention(retention),
        listen_timeout=listen_timeout,
        connections_per_worker=worker_connections(
            concurrency, held=model == "held", listen=not poll_only
        ),
        workers=workers,
    )
    schema = check_schema_name(schema)
    findings = Doctor(resolve_dsn(dsn), schema, thresholds).run()
    status = worst(findings)
    if as_json:
        report = {"schema": schema, "status": status, "findings": [asdict(f) for f in findings]}
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        _print(findings, schema)
    if STATUS_ORDER[status] >= STATUS_ORDER[fail_on]:
        raise SystemExit(1)
