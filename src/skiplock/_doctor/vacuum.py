"""``skiplock doctor``'s checks of what makes the queue tables bloat: ``xmin_horizon`` (old
transactions that hold vacuum back) with ``visibility``, ``dead_tuples`` with ``autovacuum``,
and ``claim_index`` (bloated or invalid) with ``invalid_indexes``.  Each takes the
:class:`~skiplock._doctor.session.DoctorSession` it checks."""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from skiplock._doctor.findings import COUNT_CAP, Finding, Status, byte_size, duration, worse
from skiplock._doctor.session import DoctorSession

INDEX_ENTRY_BYTES = 64  # a claim-index entry (queue, priority, run_at, id) with its overhead


def check_xmin_horizon(doctor: DoctorSession, conn: Connection[Any]) -> list[Finding]:
    limit = doctor.thresholds.transaction_seconds
    sees_all = bool(doctor.statements.doctor_session_visibility(conn)[0]["sees_all"])
    sessions = doctor.statements.doctor_old_transactions(conn, older_than=limit, limit=20)
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
                f"no transaction in this database has been open for over {duration(limit)}",
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
            f"{who}) {s['state']} for {duration(s['state_seconds'])}, transaction open "
            f"{duration(s['xact_seconds'])}, {s['xmin_age']} transactions behind: "
            f"{s['query']!r}"
        )
        s["skiplock"] = own
    oldest = sessions[0]["xact_seconds"]
    status: Status = "fail" if oldest >= 10 * limit else "warn"
    findings.append(
        Finding(
            "xmin_horizon",
            status,
            f"{len(sessions)} session(s) hold transactions open for over {duration(limit)}, "
            f"the oldest for {duration(oldest)}; vacuum cannot remove rows that died since, in "
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


def check_dead_tuples(doctor: DoctorSession, conn: Connection[Any]) -> list[Finding]:
    t = doctor.thresholds
    tables = doctor.statements.doctor_table_health(conn)
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
                f'"{doctor.schema}".jobs from a scheduler every minute or so)',
            )
        )
    problems: list[str] = []
    bloated: list[str] = []
    status: Status = "ok"
    summary = []
    for row in tables:
        name, live, dead = row["relname"], row["n_live_tup"], row["n_dead_tup"]
        options = dict(o.split("=", 1) for o in row["reloptions"] if "=" in o)
        vacuumed = row["vacuum_seconds"]
        summary.append(
            f"{name}: {live} live, {dead} dead, "
            + (f"vacuumed {duration(vacuumed)} ago" if vacuumed is not None else "never vacuumed")
            + f", {byte_size(row['bytes'])}"
        )
        if options.get("autovacuum_enabled", "on").lower() in ("false", "off", "0", "no"):
            problems.append(f"autovacuum is disabled on {doctor.schema}.{name}")
            status = worse(status, "warn")
        if dead >= t.dead_tuples and dead >= t.dead_ratio * live:
            problems.append(
                f"{doctor.schema}.{name} has {dead} dead rows for {live} live ones; last "
                f"vacuum {duration(vacuumed)} ago, last analyze "
                f"{duration(row['analyze_seconds'])} ago"
            )
            status = worse(status, "fail" if dead > live else "warn")
            bloated.append(f'"{doctor.schema}".{name}')
    details = {"tables": tables}
    if not problems:
        findings.append(
            Finding("dead_tuples", "ok", "; ".join(summary) or "no statistics", "", details)
        )
        return findings
    jobs = f'"{doctor.schema}".jobs'
    findings.append(
        Finding(
            "dead_tuples",
            status,
            "; ".join(problems),
            f"VACUUM (ANALYZE) {', '.join(bloated or [jobs])}; first end the long transactions "
            "the xmin_horizon check lists, or vacuum cannot remove them. Keep autovacuum on "
            f"(ALTER TABLE {jobs} RESET (autovacuum_enabled)); if it cannot keep up, lower "
            "autovacuum_vacuum_scale_factor/threshold on the table, delete finished jobs "
            "sooner (retention, completion='delete'), or give autovacuum more workers",
            details,
        )
    )
    return findings


def check_claim_index(doctor: DoctorSession, conn: Connection[Any]) -> list[Finding]:
    t = doctor.thresholds
    indexes = doctor.statements.doctor_job_indexes(conn, cap=COUNT_CAP)
    by_name = {i["name"]: i for i in indexes}
    claim = by_name.get("jobs_claim_idx")
    jobs = f'"{doctor.schema}".jobs'
    findings = []
    if claim is None:
        findings.append(
            Finding(
                "claim_index",
                "fail",
                f"the claim index {doctor.schema}.jobs_claim_idx is missing: every claim "
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
                f"the claim index {doctor.schema}.jobs_claim_idx is invalid (a failed "
                "concurrent build): claims cannot use it",
                f'REINDEX INDEX CONCURRENTLY "{doctor.schema}".jobs_claim_idx;',
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
                    f"the claim index is bloated: {byte_size(size)} for {pending} pending jobs "
                    f"(about {byte_size(needed)} needed); claims walk its empty pages",
                    f'REINDEX INDEX CONCURRENTLY "{doctor.schema}".jobs_claim_idx; then find '
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
                    f"the claim index is valid, {byte_size(size)} for {pending} pending jobs",
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
                f"invalid indexes on {doctor.schema}.jobs (leftovers of failed concurrent "
                f"builds, still maintained on every write): {', '.join(broken)}",
                " ".join(f'DROP INDEX CONCURRENTLY "{doctor.schema}"."{name}";' for name in broken),
                {"indexes": broken},
            )
        )
    return findings
