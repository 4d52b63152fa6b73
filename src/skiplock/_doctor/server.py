"""``skiplock doctor``'s checks of the server around the queue: ``listen`` (a notification
reaches a listening session, as a worker's wake-ups need) and ``connections`` (slots left for
more workers).  How doctor opens its sessions (as ``skiplock-doctor``) is
:func:`skiplock._doctor.session.connect`."""

from __future__ import annotations

import secrets
import time
from typing import Any

from psycopg import Connection

from skiplock._db.sql import Queries
from skiplock._db.store_sync import SyncStore
from skiplock._doctor.findings import Finding, duration
from skiplock._doctor.session import DoctorSession, connect


def check_listen(doctor: DoctorSession, notify_dsn: str | None = None) -> Finding:
    """LISTEN on one connection, NOTIFY from another (``notify_dsn``, default the same
    database), and wait for it: what a worker's wake-ups rely on."""
    ok, waited = probe_listen(
        doctor.dsn,
        notify_dsn or doctor.dsn,
        doctor.queries,
        doctor.store,
        timeout=doctor.thresholds.listen_timeout,
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
        f"a notification sent on {doctor.queries.channel!r} did not arrive within "
        f"{duration(waited)}: workers will not be woken by new jobs and wait up to their poll "
        "interval instead (a transaction-mode pooler such as PgBouncer "
        "pool_mode=transaction does this)",
        "point workers at PostgreSQL directly or through a session-mode pool; or run them "
        "with --poll-only and a short --poll-interval (and, unless the pooler tracks prepared "
        "statements, with SKIPLOCK_PREPARED_STATEMENTS=off: see docs/operations.md)",
        {"seconds": waited},
    )


def check_connections(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    per_worker = doctor.thresholds.connections_per_worker
    row = doctor.statements.doctor_connections(conn)[0]
    usable = row["max_connections"] - row["reserved"]
    if doctor.thresholds.workers is not None:
        return _fleet_headroom(row, usable, doctor.thresholds.workers, per_worker)
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


def _fleet_headroom(row: dict[str, Any], usable: int, workers: int, per_worker: int) -> Finding:
    """The slots a fleet of ``workers`` processes leaves: the sessions of workers running now
    (named ``skiplock-worker`` and ``skiplock-listener``) are counted as the fleet's, at its
    most, and this doctor's end with it; every other session stays (enqueuers, dashboards)."""
    others = row["in_use"] - row["worker_sessions"] - row["own_sessions"]
    need = workers * per_worker
    headroom = usable - others - need
    details = {**row, "usable": usable, "others": others, "fleet_needs": need,
               "headroom": headroom, "workers": workers, "per_worker": per_worker}  # fmt: skip
    message = (
        f"a fleet of {workers} worker processes needs up to {need} connections ({per_worker} "
        f"each); {usable} slots usable (max_connections {row['max_connections']} less "
        f"{row['reserved']} reserved for superusers), {others} held by other sessions: "
        f"headroom {headroom} (the workers' sessions now: {row['worker_sessions']}, "
        f"{row['listeners']} of them listeners)"
    )
    if headroom >= per_worker:
        return Finding("connections", "ok", message, "", details)
    return Finding(
        "connections",
        "fail" if headroom < 0 else "warn",
        message + ("; the fleet exhausts the server" if headroom < 0 else ""),
        "raise max_connections (needs a restart), run fewer worker processes with a higher "
        "--concurrency each, or put a session-mode pooler in front of enqueuers; a worker "
        "that finds no slot waits for one, with backoff",
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
    with connect(listen_dsn) as listener:
        store.channel_listen(listener)
        with connect(notify_dsn) as sender:
            started = time.monotonic()
            store.channel_notify(sender, payload)
        deadline = started + timeout
        while (left := deadline - time.monotonic()) > 0:
            for notify in listener.notifies(timeout=left, stop_after=1):
                if notify.channel == queries.channel and notify.payload == payload:
                    return True, time.monotonic() - started
    return False, timeout
