"""Attack test (issue 41): a worker-role session's passing FOR KEY SHARE on held_runs (a
diagnostic query, say) while a held-lock job of a limited key runs.  That claim
(job_claim_one_held_of_key) locks its session's row of held_runs through held_run_mark
(migration 0024), FOR NO KEY UPDATE, which a KEY SHARE lock joins: the row's xmax became a
multixact, which xact_running does not read, and the job was shown pending for the rest of its
run, though it runs (the claim of migration 0024's job_claim locks FOR UPDATE since)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from skiplock import App

from .test_held_key_limits import claim_held

pytestmark = pytest.mark.smoke


def test_a_passing_share_lock_on_held_runs_does_not_hide_a_running_limited_held_job(
    app: App, store: Any
) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.with_options(limit_key="k").enqueue_many([{"n": i} for i in range(2)])
    app.sync_client.set_key_limit("k", concurrency=1)
    running, sharer, guard = (psycopg.connect(app.dsn, autocommit=True) for _ in range(3))
    try:
        job = claim_held(store, running, guard)
        assert job is not None
        with sharer.transaction():
            sharer.execute(
                sql.SQL("SELECT FROM {} FOR KEY SHARE SKIP LOCKED").format(
                    sql.Identifier(app.schema, "held_runs")
                )
            )
        shown = app.sync_client.get_job(job.id)
        assert shown is not None and shown.status == "running"
    finally:
        for conn in (running, sharer, guard):
            conn.close()
