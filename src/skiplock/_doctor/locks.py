"""``skiplock doctor``'s ``locks`` check: sessions holding skiplock's locks that they should
not, each listed once with every key it holds, and what those locks can still do.

Claims never wait long on a lock another session can take (see docs/security.md): a limited
queue's claim lock (its row of the ``queues`` table) is waited for a bounded time, then that
queue is passed over while the lock is held.  The held-lock markers (advisory locks) delay no
claim of this version, which counts and shows running held-lock jobs by row locks of
``held_runs`` that only workers take: held by a login that is no worker, they matter to workers
of earlier versions during an upgrade (which count them), and an exclusive queue marker leaves
a held-lock claim behind a transaction-mode pooler uncounted until its session's row of the
queue is committed.  The schema's migration lock, held long, makes a ``skiplock migrate`` with
work give up after its ``--lock-wait``.  Either way no job is lost, and this check names the
session, so that it can be ended.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from skiplock._doctor.findings import Finding, duration
from skiplock._doctor.session import DoctorSession

SHOWN = 20  # sessions listed at most
KEYS_READ = SHOWN * 10  # locks read at most


def describe_key(lock: dict[str, Any]) -> str:
    mode = lock["mode"] if lock["granted"] else f"{lock['mode']}, waiting"
    if lock["kind"] == "queue marker":
        return f"the held-lock queue marker of {lock['queue']!r} ({mode})"
    if lock["kind"] == "job marker":
        bits = lock["low_bits"]
        return f"a held-lock job marker of the job ids that are {bits} modulo 2^32 ({mode})"
    if lock["kind"] == "migration lock":
        return f"the schema's migration lock ({mode})"
    return f"rows of the queues table ({mode})"


def holders(locks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per session, in pid order, with the descriptions of the keys it holds."""
    by_pid: dict[int, dict[str, Any]] = {}
    for lock in locks:
        entry = by_pid.setdefault(
            lock["pid"],
            {
                "pid": lock["pid"],
                "usename": lock["usename"],
                "application_name": lock["application_name"],
                "xact_seconds": lock["xact_seconds"],
                "keys": [],
                "kinds": set(),
            },
        )
        entry["keys"].append(describe_key(lock))
        exclusive = lock["kind"] == "queue marker" and lock["mode"] == "ExclusiveLock"
        entry["kinds"].add("queue marker exclusive" if exclusive else lock["kind"])
    return [by_pid[pid] for pid in sorted(by_pid)][:SHOWN]


def effects(kinds: set[str]) -> list[str]:
    """What the kinds of locks held can still do, one sentence each."""
    said = []
    if "queues rows" in kinds:
        said.append(
            "A limited queue whose row of the queues table is locked has its claims passed over "
            "(after a wait of at most 1 s) for as long as the lock is held"
        )
    if "migration lock" in kinds:
        said.append(
            "A `skiplock migrate` with migrations to apply waits for the migration lock at most "
            "its --lock-wait, then fails, nothing applied (one with nothing to apply takes no "
            "lock); held by a migrate, it ends with it"
        )
    if kinds - {"queues rows", "migration lock"}:
        marker = (
            "The held-lock markers delay no claim of this version, which counts held-lock jobs "
            "by row locks of held_runs: held by a login that is no worker, they matter to "
            "workers of earlier skiplock versions during an upgrade, which miscount the "
            "held-lock jobs they name"
        )
        if "queue marker exclusive" in kinds:
            marker += (
                "; an exclusive queue marker also leaves a held-lock claim made behind a "
                "transaction-mode pooler uncounted until its session's row of the queue is "
                "committed, so that limited queue may briefly run more jobs than its limit"
            )
        said.append(marker)
    return said


def check_locks(doctor: DoctorSession, conn: Connection[Any]) -> Finding:
    locks = doctor.statements.doctor_lock_holders(
        conn, older_than=doctor.thresholds.lock_seconds, limit=KEYS_READ
    )
    if not locks:
        return Finding(
            "locks",
            "ok",
            "no session holds a limited queue's row or the migration lock long, nor a "
            "held-lock marker without being a worker",
            "",
            {},
        )
    found = holders(locks)
    listed = [
        f"pid {h['pid']} ({h['usename']}, {h['application_name'] or 'no application name'}"
        + (f", in a transaction of {duration(h['xact_seconds'])}" if h["xact_seconds"] else "")
        + "): "
        + ", ".join(h["keys"])
        for h in found
    ]
    kinds = set().union(*(h.pop("kinds") for h in found))
    count = f"{len(found)} session{'s' if len(found) != 1 else ''}"
    return Finding(
        "locks",
        "warn",
        f"{count} hold skiplock's locks: "
        + "; ".join(listed)
        + ". "
        + ". ".join(effects(kinds))
        + ".",
        "end those sessions' transactions, or the sessions: SELECT pg_terminate_backend(pid) "
        f"for pid in {[h['pid'] for h in found]}; give CONNECT on the database only to logins "
        "that need it",
        {"holders": found},
    )
