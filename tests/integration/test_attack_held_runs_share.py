"""Attack test (outside review, wip/attack): a worker-role session's passing FOR KEY SHARE on
held_runs (a diagnostic query, say) turned a running held-lock job's session-row lock into a
multixact, which xact_running does not read: the job was shown pending for the rest of its run
(jobs show, the dashboard), though it runs."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from helpers.stores import SyncStore
from skiplock import App

from .test_stranger_locks import connect, enqueue

pytestmark = pytest.mark.smoke


def test_a_passing_share_lock_on_held_runs_does_not_show_a_running_job_pending(
    app: App, store: SyncStore
) -> None:
    enqueue(app, "q", 1)
    with connect(app) as held:
        job = store.job_claim_held(held, ["q"], "w1", 30.0)
        assert job is not None
        with psycopg.connect(app.dsn, autocommit=True) as sharer, sharer.transaction():
            sharer.execute(
                sql.SQL("SELECT FROM {} FOR KEY SHARE SKIP LOCKED").format(
                    sql.Identifier(app.schema, "held_runs")
                )
            )
        shown = app.sync_client.get_job(job.id)
        assert shown is not None and shown.status == "running"
