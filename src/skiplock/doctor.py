"""``skiplock doctor``: look at a live database and say what needs doing, and how.

Each check gives one :class:`Finding`: ``ok``, ``warn`` (needs attention: the queue works but
degrades, or will) or ``fail`` (broken now, or about to be).  The command exits 1 when any
finding is at or above ``--fail-on`` (default ``warn``), else 0; it cannot connect: 1 with one
``error:`` line.  The checks, with the rules in :class:`Thresholds`:

- ``schema``: skiplock's tables exist and every migration is applied;
- ``xmin_horizon``: sessions of this database whose transaction (holding an xid or snapshot)
  is older than ``transaction_seconds`` keep vacuum from removing dead rows everywhere, held-lock
  jobs included; ``fail`` past 10 times that;
- ``visibility``: doctor can only judge sessions it may see (superuser or ``pg_monitor``);
- ``autovacuum``: autovacuum is on for the server (``warn`` when off);
- ``dead_tuples``: per queue table, dead rows at least ``dead_tuples`` and ``dead_ratio`` of
  the live ones (``fail`` when more dead than live), or autovacuum disabled on the table;
- ``expired_leases``: running jobs whose lease ran out more than ``lease_grace`` seconds ago:
  nobody reclaims them (the maintenance leader does, every few seconds);
- ``claim_index``: ``jobs_claim_idx`` exists, is valid, and is not bloated: bloated means at
  least ``index_min_bytes`` and over ``index_factor`` times the size its pending entries need
  (``INDEX_ENTRY_BYTES`` each); any other invalid index on the jobs table (a failed
  ``CREATE INDEX CONCURRENTLY`` / ``REINDEX CONCURRENTLY`` leftover) is reported too;
- ``retention``: finished jobs older than their status's retention plus ``retention_grace``
  (pruning is behind, or no worker runs maintenance);
- ``listen``: a notification sent from a second connection reaches a listening one within
  ``listen_timeout`` seconds (a transaction-mode pooler breaks this);
- ``connections``: free connection slots for at least two more worker processes
  (``connections_per_worker`` each, see docs/operations.md); ``fail`` below one.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import click
import psycopg
from psycopg import Connection
from psycopg.rows import dict_row
from rich.console import Console
from rich.table import Table

from ._store_sync import SyncStore
from .admin import dsn_option, schema_option
from .app import DEFAULT_RETENTION
from .database import connect_kwargs, resolve_dsn, unavailable
from .migrations import all_migrations
from .payload import check_schema_name
from .sql import Queries

Status = Literal["ok", "warn", "fail"]
STATUS_ORDER: dict[str, int] = {"ok": 0, "warn": 1, "fail": 2}
APPLICATION_NAME = "skiplock-doctor"
INDEX_ENTRY_BYTES = 64  # a claim-index entry (queue, priority, run_at, id) with its overhead
COUNT_CAP = 1_000_000  # rows counted at most by one check, so doctor stays cheap


@dataclass(frozen=True)
class Thresholds:
    """When a finding becomes ``warn`` (see the module docstring for each rule)."""

    transaction_seconds: float = 60.0
    dead_tuples: int = 10_000
    dead_ratio: float = 0.2
    lease_grace: float = 30.0
    index_min_bytes: int = 50 * 1024 * 1024
    index_factor: float = 10.0
    retention: Mapping[str, float | None] = field(default_factory=lambda: dict(DEFAULT_RETENTION))
    retention_grace: float = 3600.0
    listen_timeout: float = 1.0
    connections_per_worker: int = 7


@dataclass
class Finding:
    check: str
    status: Status
    message: str
    fix: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def worst(findings: list[Finding]) -> Status:
    status: Status = "ok"
    for f in findings:
        status = _worse(status, f.status)
    return status


def _worse(a: Status, b: Status) -> Status:
    return a if STATUS_ORDER[a] >= STATUS_ORDER[b] else b


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("kB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


class Doctor:
    """Runs the checks on one database and schema; each ``check_*`` method returns findings."""

    def __init__(self, dsn: str, schema: str, thresholds: Thresholds | None = None) -> None:
        self.dsn = dsn
        self.schema = check_schema_name(schema)
        self.thresholds = thresholds or Thresholds()
        self.queries = Queries(self.schema)
        self.store = SyncStore(self.queries)

    # -- plumbing ------------------------------------------------------------------------

    def connect(self) -> Connection[Any]:
        kwargs = {**connect_kwargs(self.dsn), "application_name": APPLICATION_NAME}
        try:
            return Connection.connect(self.dsn, **kwargs)
        except psycopg.OperationalError as exc:
            raise unavailable(exc, self.dsn) from None

    def rows(self, conn: Connection[Any], name: str, **params: Any) -> list[dict[str, Any]]:
        """Run one named statement of ``doctor.sql``; its rows as dicts."""
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self.queries[name], params)
            return cur.fetchall()

    def run(self) -> list[Finding]:
        """Every check, in order; the table checks only when the schema is in place."""
        with self.connect() as conn:
            findings = self._guard("schema", lambda: [self.check_schema(conn)])
            tables = findings[0].status == "ok"
            findings += self._guard("xmin_horizon", lambda: self.check_xmin_horizon(conn))
            if tables:
                findings += self._guard("dead_tuples", lambda: self.check_dead_tuples(conn))
                findings += self._guard("expired_leases", lambda: [self.check_expired_leases(conn)])
                findings += self._guard("claim_index", lambda: self.check_claim_index(conn))
                findings += self._guard("retention", lambda: [self.check_retention(conn)])
            findings += self._guard("listen", lambda: [self.check_listen()])
            findings += self._guard("connections", lambda: [self.check_connections(conn)])
        return findings

    def _guard(self, check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
        """The check's findings, or one saying this role may not look (a ``warn``)."""
        try:
            return run()
        except psycopg.errors.InsufficientPrivilege as exc:
            return [
                Finding(
                    check,
                    "warn",
                    f"cannot check: {str(exc).strip().splitlines()[0]}",
                    "run doctor as the schema's owner or its admin role (`skiplock roles`)",
                )
            ]

    # -- checks --------------------------------------------------------------------------

    def check_schema(self, conn: Connection[Any]) -> Finding:
        versions = [m.version for m in all_migrations()]
        pending = self.store.migration_pending(conn, versions)
        if pending == versions:
            return Finding(
                "schema",
                "fail",
                f"skiplock's tables are missing from schema {self.schema!r}",
                f"run `skiplock migrate --schema {self.schema}` (or App.migrate())",
            )
        if pending:
            listed = ", ".join(f"{v:04d}" for v in pending)
            return Finding(
                "schema",
                "fail",
                f"schema {self.schema!r} lacks migrations {listed}; workers of this version "
                "will fail on the missing columns or tables",
                f"run `skiplock migrate --schema {self.schema}`",
                {"pending": pending},
            )
        return Finding("schema", "ok", f"schema {self.schema!r} is at migration {versions[-1]:04d}")

    def check_xmin_horizon(self, conn: Connection[Any]) -> list[Finding]:
        limit = self.thresholds.transaction_seconds
        sees_all = bool(self.rows(conn, "doctor_session_visibility")[0]["sees_all"])
        sessions = self.rows(conn, "doctor_old_transactions", older_than=limit, limit=20)
        findings = []
        if not sees_all:
            findings.append(
                Finding(
                    "visibility",
                    "warn",
                    "this role sees the transactions of its own sessions only, so long "
                    "transactions of other users go unreported",
                    "run doctor as a superuser or a member of pg_monitor (`skiplock roles` "
                    "grants it to the admin role)",
                )
            )
        if not sessions:
            findings.append(
                Finding(
                    "xmin_horizon",
                    "ok",
                    f"no transaction in this database has been open for over {_age(limit)}",
                )
            )
            return findings
        described = []
        for s in sessions:
            own = (s["application_name"] or "").startswith("skiplock")
            who = f"pid {s['pid']} ({s['usename']}"
            who += f", {s['application_name']}" if s["application_name"] else ""
            who += ", skiplock's own: a held-lock job?" if own else ""
            described.append(
                f"{who}) {s['state']} for {_age(s['state_seconds'])}, transaction open "
                f"{_age(s['xact_seconds'])}, {s['xmin_age']} transactions behind: "
                f"{s['query']!r}"
            )
            s["skiplock"] = own
        oldest = sessions[0]["xact_seconds"]
        status: Status = "fail" if oldest >= 10 * limit else "warn"
        findings.append(
            Finding(
                "xmin_horizon",
                status,
                f"{len(sessions)} session(s) hold transactions open for over {_age(limit)}, "
                f"the oldest for {_age(oldest)}; vacuum cannot remove rows that died since, in "
                "any table (claims slow down as dead rows pile up): " + "; ".join(described),
                "end them (commit, or SELECT pg_terminate_backend(pid)); set "
                "idle_in_transaction_session_timeout for the roles that leave transactions "
                "idle; keep held-lock jobs short or use the lease model; run analytics on a "
                "replica (without hot_standby_feedback). Prepared transactions "
                "(pg_prepared_xacts) and replication slots (pg_replication_slots.xmin) hold the "
                "horizon too",
                {"sessions": sessions},
            )
        )
        return findings

    def check_dead_tuples(self, conn: Connection[Any]) -> list[Finding]:
        t = self.thresholds
        tables = self.rows(conn, "doctor_table_health", schema=self.schema)
        findings = []
        if tables and tables[0]["autovacuum"] == "on":
            findings.append(Finding("autovacuum", "ok", "autovacuum is on for the server"))
        elif tables:
            findings.append(
                Finding(
                    "autovacuum",
                    "warn",
                    "autovacuum is off for the whole server: dead rows of the queue tables "
                    "are only removed by a manual VACUUM",
                    "ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf(); (or VACUUM "
                    f'"{self.schema}".jobs from a scheduler every minute or so)',
                )
            )
        problems: list[str] = []
        status: Status = "ok"
        summary = []
        for row in tables:
            name, live, dead = row["relname"], row["n_live_tup"], row["n_dead_tup"]
            options = dict(o.split("=", 1) for o in row["reloptions"] if "=" in o)
            vacuumed = row["vacuum_seconds"]
            summary.append(
                f"{name}: {live} live, {dead} dead, "
                + (f"vacuumed {_age(vacuumed)} ago" if vacuumed is not None else "never vacuumed")
            )
            if options.get("autovacuum_enabled", "on").lower() in ("false", "off", "0", "no"):
                problems.append(f"autovacuum is disabled on {self.schema}.{name}")
                status = _worse(status, "warn")
            if dead >= t.dead_tuples and dead >= t.dead_ratio * live:
                problems.append(
                    f"{self.schema}.{name} has {dead} dead rows for {live} live ones; last "
                    f"vacuum {_age(vacuumed)} ago, last analyze "
                    f"{_age(row['analyze_seconds'])} ago"
                )
                status = _worse(status, "fail" if dead > live else "warn")
        details = {"tables": tables}
        if not problems:
            findings.append(
                Finding("dead_tuples", "ok", "; ".join(summary) or "no statistics", "", details)
            )
            return findings
        jobs = f'"{self.schema}".jobs'
        findings.append(
            Finding(
                "dead_tuples",
                status,
                "; ".join(problems),
                f"VACUUM (ANALYZE) {jobs}; first end the long transactions the xmin_horizon "
                "check lists, or vacuum cannot remove them. Keep autovacuum on (ALTER TABLE "
                f"{jobs} RESET (autovacuum_enabled)); if it cannot keep up, lower "
                "autovacuum_vacuum_scale_factor/threshold on the table, delete finished jobs "
                "sooner (retention, completion='delete'), or give autovacuum more workers",
                details,
            )
        )
        return findings

    def check_expired_leases(self, conn: Connection[Any]) -> Finding:
        grace = self.thresholds.lease_grace
        row = self.rows(conn, "doctor_expired_leases", grace=grace)[0]
        leader_rows = self.rows(conn, "doctor_maintenance_leader")
        if not leader_rows:
            leader = "no worker has ever been the maintenance leader"
        elif leader_rows[0]["seconds_left"] < 0:
            leader = (
                f"the maintenance leader {leader_rows[0]['holder']} stopped renewing "
                f"{_age(-leader_rows[0]['seconds_left'])} ago"
            )
        else:
            leader = f"the maintenance leader is {leader_rows[0]['holder']}"
        details = {"count": row["n"], "oldest_seconds": row["oldest_seconds"], "leader": leader}
        if not row["n"]:
            return Finding(
                "expired_leases",
                "ok",
                f"no running job's lease expired over {_age(grace)} ago; {leader}",
                "",
                details,
            )
        details["some_ids"] = row["some_ids"]
        return Finding(
            "expired_leases",
            "warn",
            f"{row['n']} running job(s) kept their expired leases, the oldest expired "
            f"{_age(row['oldest_seconds'])} ago (e.g. ids "
            f"{', '.join(map(str, row['some_ids']))}); {leader}",
            "run at least one worker (not --burst) on this schema: its maintenance leader "
            "requeues expired jobs within seconds; if workers run, check their logs for "
            "'maintenance failed' (e.g. missing privileges; see `skiplock roles`)",
            details,
        )

    def check_claim_index(self, conn: Connection[Any]) -> list[Finding]:
        t = self.thresholds
        indexes = self.rows(conn, "doctor_job_indexes", schema=self.schema, cap=COUNT_CAP)
        by_name = {i["name"]: i for i in indexes}
        claim = by_name.get("jobs_claim_idx")
        jobs = f'"{self.schema}".jobs'
        findings = []
        if claim is None:
            findings.append(
                Finding(
                    "claim_index",
                    "fail",
                    f"the claim index {self.schema}.jobs_claim_idx is missing: every claim "
                    "scans the whole jobs table",
                    f"CREATE INDEX CONCURRENTLY jobs_claim_idx ON {jobs} "
                    "(queue, priority, run_at, id) WHERE status = 'pending';",
                )
            )
        elif not (claim["valid"] and claim["ready"]):
            findings.append(
                Finding(
                    "claim_index",
                    "fail",
                    f"the claim index {self.schema}.jobs_claim_idx is invalid (a failed "
                    "concurrent build): claims cannot use it",
                    f'REINDEX INDEX CONCURRENTLY "{self.schema}".jobs_claim_idx;',
                )
            )
        else:
            pending, size = claim["pending"], claim["bytes"]
            needed = max(pending, 1) * INDEX_ENTRY_BYTES
            details = {"bytes": size, "pending": pending, "needed_bytes": needed}
            if size >= t.index_min_bytes and size > t.index_factor * needed:
                findings.append(
                    Finding(
                        "claim_index",
                        "warn",
                        f"the claim index is bloated: {_size(size)} for {pending} pending jobs "
                        f"(about {_size(needed)} needed); claims walk its empty pages",
                        f'REINDEX INDEX CONCURRENTLY "{self.schema}".jobs_claim_idx; then find '
                        "what let it grow: a backlog that drained, or long transactions "
                        "(xmin_horizon) stalling vacuum",
                        details,
                    )
                )
            else:
                findings.append(
                    Finding(
                        "claim_index",
                        "ok",
                        f"the claim index is valid, {_size(size)} for {pending} pending jobs",
                        "",
                        details,
                    )
                )
        broken = [i["name"] for i in indexes if not (i["valid"] and i["ready"])]
        broken = [name for name in broken if name != "jobs_claim_idx"]
        if broken:
            findings.append(
                Finding(
                    "invalid_indexes",
                    "warn",
                    f"invalid indexes on {self.schema}.jobs (leftovers of failed concurrent "
                    f"builds, still maintained on every write): {', '.join(broken)}",
                    " ".join(
                        f'DROP INDEX CONCURRENTLY "{self.schema}"."{name}";' for name in broken
                    ),
                    {"indexes": broken},
                )
            )
        return findings

    def check_retention(self, conn: Connection[Any]) -> Finding:
        t = self.thresholds
        kept = {s: sec for s, sec in t.retention.items() if sec is not None}
        statuses = sorted(kept)
        rows = self.rows(
            conn,
            "doctor_finished_past_retention",
            statuses=statuses,
            older_than=[kept[s] for s in statuses],
            grace=t.retention_grace,
            cap=COUNT_CAP,
        )
        late = [r for r in rows if r["n"]]
        details = {"statuses": rows}
        forever = sorted(s for s, sec in t.retention.items() if sec is None)
        note = f" ({', '.join(forever)} kept forever)" if forever else ""
        if not late:
            return Finding(
                "retention",
                "ok",
                "no finished job is past its retention"
                + note
                + "".join(
                    f"; oldest {r['status']}: {_age(r['oldest_seconds'])}"
                    for r in rows
                    if r["oldest_seconds"] is not None
                ),
                "",
                details,
            )
        parts = [
            f"{r['n'] if r['n'] < COUNT_CAP else f'over {COUNT_CAP}'} {r['status']} jobs "
            f"older than {_age(kept[r['status']])} (oldest {_age(r['oldest_seconds'])})"
            for r in late
        ]
        return Finding(
            "retention",
            "warn",
            "finished jobs pile up past their retention: " + "; ".join(parts) + note,
            f"`skiplock prune --schema {self.schema}` deletes them now; workers (not --burst) "
            "prune every minute on their maintenance leader, so check that one runs. If you "
            "keep them on purpose, pass the app's retention (--retention done=none)",
            details,
        )

    def check_listen(self, notify_dsn: str | None = None) -> Finding:
        """LISTEN on one connection, NOTIFY from another (``notify_dsn``, default the same
        database), and wait for it: what a worker's wake-ups rely on."""
        ok, waited = probe_listen(
            self.dsn,
            notify_dsn or self.dsn,
            self.queries,
            self.store,
            timeout=self.thresholds.listen_timeout,
        )
        if ok:
            return Finding(
                "listen",
                "ok",
                f"LISTEN/NOTIFY works: a notification arrived in {waited * 1000:.0f} ms",
                "",
                {"seconds": waited},
            )
        return Finding(
            "listen",
            "warn",
            f"a notification sent on {self.queries.channel!r} did not arrive within "
            f"{_age(waited)}: workers will not be woken by new jobs and wait up to their poll "
            "interval instead (a transaction-mode pooler such as PgBouncer "
            "pool_mode=transaction does this)",
            "point workers at PostgreSQL directly or through a session-mode pool; or run them "
            "with --poll-only and a short --poll-interval",
            {"seconds": waited},
        )

    def check_connections(self, conn: Connection[Any]) -> Finding:
        per_worker = self.thresholds.connections_per_worker
        row = self.rows(conn, "doctor_connections")[0]
        usable = row["max_connections"] - row["reserved"]
        free = usable - row["in_use"]
        room = max(free, 0) // per_worker
        details = {**row, "free": free, "room_for_workers": room}
        message = (
            f"{row['in_use']} of {usable} connection slots in use (max_connections "
            f"{row['max_connections']}, {row['reserved']} reserved for superusers), "
            f"{row['skiplock_sessions']} of them skiplock's ({row['listeners']} worker "
            f"listeners); room for about {room} more worker processes at {per_worker} each"
        )
        if room >= 2:
            return Finding("connections", "ok", message, "", details)
        return Finding(
            "connections",
            "fail" if room < 1 else "warn",
            message,
            "raise max_connections (needs a restart), run fewer worker processes with a "
            "higher --concurrency each, or put a session-mode pooler in front of enqueuers",
            details,
        )


def probe_listen(
    listen_dsn: str,
    notify_dsn: str,
    queries: Queries,
    store: SyncStore,
    *,
    timeout: float = 1.0,
) -> tuple[bool, float]:
    """Whether a notification sent through ``notify_dsn`` reaches a session LISTENing through
    ``listen_dsn`` within ``timeout`` seconds; and the seconds it took (or waited)."""
    payload = f"doctor:{secrets.token_hex(8)}"
    try:
        listener = Connection.connect(
            listen_dsn, **{**connect_kwargs(listen_dsn), "application_name": APPLICATION_NAME}
        )
    except psycopg.OperationalError as exc:
        raise unavailable(exc, listen_dsn) from None
    with listener:
        store.channel_listen(listener)
        try:
            sender = Connection.connect(
                notify_dsn, **{**connect_kwargs(notify_dsn), "application_name": APPLICATION_NAME}
            )
        except psycopg.OperationalError as exc:
            raise unavailable(exc, notify_dsn) from None
        with sender:
            started = time.monotonic()
            store.channel_notify(sender, payload)
        deadline = started + timeout
        while (left := deadline - time.monotonic()) > 0:
            for notify in listener.notifies(timeout=left, stop_after=1):
                if notify.channel == queries.channel and notify.payload == payload:
                    return True, time.monotonic() - started
    return False, timeout


# -- command line ------------------------------------------------------------------------


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
    console = Console()
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
