"""Rows of held_runs of sessions that are gone are removed without a leader (issue 41).

Each held-lock worker session registers a row per queue (migration 0024); only the maintenance
leader deleted the rows of sessions that ended.  Held-lock workers crashing in a loop with no
leader running piled them up, and every count of a queue's running jobs read them all
(bench/README.md, "Stale held_runs rows and the running count").
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from helpers.stores import SyncStore
from skiplock import App

STALE = 2500  # rows of gone sessions: more than one session start removes


def rows(db: Any, app: App) -> dict[int, int]:
    """pid -> rows of held_runs, for the sessions that are gone (negative pids) as -1."""
    found = db.execute(
        sql.SQL("SELECT pid FROM {}").format(sql.Identifier(app.schema, "held_runs"))
    ).fetchall()
    counts: dict[int, int] = {}
    for (pid,) in found:
        counts[max(pid, -1)] = counts.get(max(pid, -1), 0) + 1
    return counts


def test_held_lock_sessions_remove_the_rows_of_gone_sessions_without_a_leader(
    app: App, store: SyncStore, db: Any
) -> None:
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, pid) SELECT q, -g FROM generate_series(1, %s) AS g,"
            " unnest(ARRAY['q', 'elsewhere']) AS q"
        ).format(sql.Identifier(app.schema, "held_runs")),
        [STALE // 2],
    )
    assert rows(db, app) == {-1: STALE}
    with psycopg.connect(app.dsn, autocommit=True) as live:
        assert store.job_claim_held(live, ["q"], "w", 30.0) is None  # registers, runs nothing
        starts = 0
        while rows(db, app).get(-1) and starts < 10:
            # A held-lock worker that starts and dies at once, again and again, no leader.
            with psycopg.connect(app.dsn, autocommit=True) as conn:
                store.job_claim_held(conn, ["q", "r"], "w", 30.0)
            starts += 1
        left = rows(db, app)
        assert left.get(-1) is None, f"{left.get(-1)} rows of gone sessions after {starts} starts"
        assert left.get(live.info.backend_pid) == 1  # a live session's row stays
        assert starts > 1  # each start removes a bounded number
