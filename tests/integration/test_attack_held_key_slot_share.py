"""Attack test (outside review, wip/attack): a worker-role session's passing FOR KEY SHARE on
held_key_runs (a diagnostic query, say) made a running held-lock job's slot lock a multixact,
which xact_running does not read: the job stopped counting against its key for the rest of its
run, and the key ran past its limit."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from skiplock import App

from .test_held_key_limits import claim_held

pytestmark = pytest.mark.smoke


def test_a_passing_share_lock_on_the_slots_does_not_hide_a_running_held_job(
    app: App, store: Any
) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.with_options(limit_key="k").enqueue_many([{"n": i} for i in range(3)])
    app.sync_client.set_key_limit("k", concurrency=1)
    running, other, sharer = (psycopg.connect(app.dsn, autocommit=True) for _ in range(3))
    guard = psycopg.connect(app.dsn, autocommit=True)
    try:
        assert claim_held(store, running, guard) is not None
        with sharer.transaction():
            sharer.execute(
                sql.SQL("SELECT FROM {} WHERE key = 'k' FOR KEY SHARE SKIP LOCKED").format(
                    sql.Identifier(app.schema, "held_key_runs")
                )
            )
        jobs, _ = store.job_claim_key_limited(other, ["q"], 10, "w2", 30.0)
        assert jobs == [], "a leased job of a key limited to 1 started while a held one runs"

    finally:
        for conn in (running, other, sharer, guard):
            conn.close()
