"""``skiplock doctor``'s checks of what skiplock's own upkeep keeps in order: ``schema`` (the
migrations), ``workers`` (a live worker for every queue with due jobs), ``expired_leases``
(the maintenance leader's reclaims), ``impossible_states`` (rows no statement of skiplock
writes) and ``retention`` (its pruning).  Each takes the
:class:`~skiplock._doctor.session.DoctorSession` it checks."""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from skiplock._db.migrations import all_migrations
from skiplock._doctor.findings import COUNT_CAP, Finding, duration
from skiplock._doctor.session import DoctorSession


def check_schema(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    versions = [m.version for m in all_migrations()]
    pending = doctor.store.migration_pending(conn, versions)
    if pending == versions:
        return Finding(
            "schema",
            "fail",
            f"skiplock's tables are missing from schema {doctor.schema!r}",
            f"run `skiplock migrate --schema {doctor.schema}` (or App.migrate())",
        )
    if pending:
        listed = ", ".join(f"{v:04d}" for v in pending)
        return Finding(
            "schema",
            "fail",
            f"schema {doctor.schema!r} lacks migrations {listed}; workers of this version "
            "will fail on the missing columns or tables",
            f"run `skiplock migrate --schema {doctor.schema}`",
            {"pending": pending},
        )
    return Finding("schema", "ok", f"schema {doctor.schema!r} is at migration {versions[-1]:04d}")


def check_workers(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    unserved = doctor.statements.doctor_queues_without_workers(conn, cap=COUNT_CAP)
    workers = doctor.statements.doctor_workers(conn)
    live = [w for w in workers if w["live"]]
    silent = [w for w in workers if not w["live"]]
    details = {"live": len(live), "silent": silent, "queues_without_workers": unserved}
    problems = [
        f"{r['queue']} has {r['n']} due job(s), the oldest waiting {duration(r['oldest_seconds'])}"
        f", and no live worker"
        for r in unserved
    ]
    problems += [
        f"worker {w['id']} stopped reporting {duration(w['seen_ago'])} ago with "
        f"{w['running']} job(s) still running under its name"
        for w in silent
        if w["running"]
    ]
    quiet = len(silent) - sum(1 for w in silent if w["running"])
    note = f"; {quiet} silent worker row(s) without jobs, pruned after an hour" if quiet else ""
    if not problems:
        return Finding(
            "workers",
            "ok",
            f"{len(live)} live worker(s); every queue with due jobs has one{note}",
            "",
            details,
        )
    return Finding(
        "workers",
        "warn",
        "; ".join(problems) + note,
        "start workers for those queues (`skiplock worker APP`, or `--queues`; `skiplock "
        "workers` lists the running ones); a silent worker's leased jobs are requeued when "
        "their leases expire, its held-lock jobs when the server drops its connection",
        details,
    )


def check_expired_leases(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    grace = doctor.thresholds.lease_grace
    row = doctor.statements.doctor_expired_leases(conn, grace=grace)[0]
    leader_rows = doctor.statements.doctor_maintenance_leader(conn)
    if not leader_rows:
        leader = "no worker has ever been the maintenance leader"
    elif leader_rows[0]["seconds_left"] < 0:
        leader = (
            f"the maintenance leader {leader_rows[0]['holder']} stopped renewing "
            f"{duration(-leader_rows[0]['seconds_left'])} ago"
        )
    else:
        leader = f"the maintenance leader is {leader_rows[0]['holder']}"
    details = {"count": row["n"], "oldest_seconds": row["oldest_seconds"], "leader": leader}
    if not row["n"]:
        return Finding(
            "expired_leases",
            "ok",
            f"no running job's lease expired over {duration(grace)} ago; {leader}",
            "",
            details,
        )
    details["some_ids"] = row["some_ids"]
    return Finding(
        "expired_leases",
        "warn",
        f"{row['n']} running job(s) kept their expired leases, the oldest expired "
        f"{duration(row['oldest_seconds'])} ago (e.g. ids "
        f"{', '.join(map(str, row['some_ids']))}); {leader}",
        "run at least one worker (not --burst) on this schema: its maintenance leader "
        "requeues expired jobs within seconds; if workers run, check their logs for "
        "'maintenance failed' (e.g. missing privileges; see `skiplock roles`)",
        details,
    )


def check_impossible_states(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    row = doctor.statements.doctor_impossible_states(conn, cap=COUNT_CAP)[0]
    details = {
        "running_without_lease": row["running_ids"],
        "finished_without_time": row["finished_ids"],
    }
    problems = []
    if row["running_without_lease"]:
        problems.append(
            f"{row['running_without_lease']} running job(s) without a lease (e.g. ids "
            f"{', '.join(map(str, row['running_ids']))}): never reclaimed, each holds its "
            "entity key and a slot of its queue's concurrency limit"
        )
    if row["finished_without_time"]:
        problems.append(
            f"{row['finished_without_time']} finished job(s) without a finish time (e.g. ids "
            f"{', '.join(map(str, row['finished_ids']))}): never pruned"
        )
    if not problems:
        return Finding(
            "impossible_states", "ok", "no job is in a state skiplock never writes", "", details
        )
    jobs = f"{doctor.schema}.jobs"
    return Finding(
        "impossible_states",
        "fail",
        "; ".join(problems),
        "only the schema's owner can write these (migration 0014 refuses running jobs without "
        "a lease; the enqueuer role may insert only claimable jobs): find who did. Then "
        f"`UPDATE {jobs} SET locked_until = now() WHERE status = 'running' AND locked_until "
        "IS NULL` has the maintenance leader requeue them, and `UPDATE "
        f"{jobs} SET finished_at = now() WHERE status IN ('done', 'failed', 'cancelled') AND "
        "finished_at IS NULL` lets pruning take them",
        details,
    )


def check_retention(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    t = doctor.thresholds
    kept = {s: sec for s, sec in t.retention.items() if sec is not None and s != "archive"}
    statuses = sorted(kept)
    rows = doctor.statements.doctor_finished_past_retention(
        conn,
        statuses=statuses,
        older_than=[kept[s] for s in statuses],
        grace=t.retention_grace,
        cap=COUNT_CAP,
    )
    late = [r for r in rows if r["n"]]
    details = {"statuses": rows}
    forever = sorted(s for s, sec in t.retention.items() if sec is None and s != "archive")
    note = f" ({', '.join(forever)} kept forever)" if forever else ""
    if not late:
        return Finding(
            "retention",
            "ok",
            "no finished job is past its retention"
            + note
            + "".join(
                f"; oldest {r['status']}: {duration(r['oldest_seconds'])}"
                for r in rows
                if r["oldest_seconds"] is not None
            ),
            "",
            details,
        )
    parts = [
        f"{r['n'] if r['n'] < COUNT_CAP else f'over {COUNT_CAP}'} {r['status']} jobs "
        f"older than {duration(kept[r['status']])} (oldest {duration(r['oldest_seconds'])})"
        for r in late
    ]
    return Finding(
        "retention",
        "warn",
        "finished jobs pile up past their retention: " + "; ".join(parts) + note,
        f"`skiplock prune --schema {doctor.schema}` deletes them now; workers (not --burst) "
        "prune every minute on their maintenance leader, so check that one runs. If you "
        "keep them on purpose, pass the app's retention (--retention done=none)",
        details,
    )


def check_archive(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    """The archive: its size, its oldest job against its retention (a partitioned archive
    keeps up to a day more: it drops whole days), and for a partitioned one, whether the
    partitions reach ahead of now and none of its jobs went to the default partition."""
    health = doctor.store.archive_health(conn)
    keep = doctor.thresholds.retention.get("archive")
    details = dict(health)
    size = f"about {health['rows_estimate']:,} archived jobs, {health['bytes'] / 1e6:,.1f} MB" + (
        f", in {health['partitions']} daily partitions" if health["partitioned"] else ""
    )
    oldest = health["oldest_seconds"]
    problems = []
    if keep is not None and oldest is not None:
        late = keep + doctor.thresholds.retention_grace + (86400 if health["partitioned"] else 0)
        if oldest > late:
            problems.append(
                f"the oldest archived job finished {duration(oldest)} ago, past the archive's "
                f"retention of {duration(keep)}"
            )
    if health["partitioned"] and (health["ahead_seconds"] or 0) <= 0:
        problems.append("no daily partition is made for today or later")
    if health["default_rows"]:
        problems.append(
            f"{health['default_rows']:,} archived jobs went to the default partition (no daily "
            "partition was there for their day)"
        )
    kept = "kept forever" if keep is None else f"kept {duration(keep)}"
    if not problems:
        return Finding("archive", "ok", f"{size}; {kept}", "", details)
    return Finding(
        "archive",
        "warn",
        f"{size}: " + "; ".join(problems),
        "workers (not --burst) prune the archive and make its partitions every minute on their "
        f"maintenance leader: check that one runs; `skiplock prune --schema {doctor.schema}` "
        "prunes now. If you keep archived jobs longer on purpose, pass the app's retention "
        "(--retention archive=SECONDS|none)",
        details,
    )
