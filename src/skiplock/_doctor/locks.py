"""``skiplock doctor``'s ``locks`` check: sessions holding locks that delay skiplock's claims.

Claims never wait long on a lock another session can take (see docs/security.md): a limited
queue's claim lock (its row of the ``queues`` table) is waited for a bounded time, then that
queue is passed over.  A held-lock marker (an advisory lock) taken by a login that is no worker
delays nothing now (held-lock jobs are counted by row locks only workers take), but workers of
earlier versions miscount the jobs it names, and a login that takes skiplock's locks is worth
a look.  Either way the jobs are not lost, and this check names the session, so that it can be
ended.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from skiplock._doctor.findings import Finding, duration
from skiplock._doctor.session import DoctorSession

SHOWN = 20  # sessions listed at most


def check_locks(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    holders = doctor.statements.doctor_lock_holders(
        conn, older_than=doctor.thresholds.lock_seconds, limit=SHOWN
    )
    if not holders:
        return Finding(
            "locks", "ok", "no session holds a lock that delays skiplock's claims", "", {}
        )
    described = [
        f"pid {h['pid']} ({h['usename']}, {h['application_name'] or 'no application name'}) "
        f"{'holds' if h['granted'] else 'waits for'} {h['what']} ({h['mode']})"
        + (f" in a transaction of {duration(h['xact_seconds'])}" if h["xact_seconds"] else "")
        for h in holders
    ]
    pids = sorted({h["pid"] for h in holders})
    return Finding(
        "locks",
        "warn",
        "sessions delay claims: " + "; ".join(described) + ". A limited queue whose row is "
        "locked is passed over by claims while it stays locked; a held-lock marker locked by "
        "a login that is not a worker delays nothing, but workers of earlier skiplock versions "
        "miscount the jobs it names",
        "end those sessions' transactions, or the sessions: SELECT pg_terminate_backend(pid) "
        f"for pid in {pids}; give CONNECT on the database only to logins that need it",
        {"holders": holders},
    )
