"""Attack test (outside review, wip/attack): a worker-role session's passing
FOR KEY SHARE on held_key_slots (a diagnostic query, say) turns a running held-lock job's
entity-key slot lock (FOR NO KEY UPDATE, entity_key_hold of migration 0020) into a multixact,
which entity_key_held does not read: the key looks free, so a leased claim picks the key's
next job and its batch then waits on the unique index of running keys until lock_timeout
(no job runs twice, but the whole batch, the key's free neighbours too, comes back empty,
claim after claim, for as long as the held job runs).  Fixed by migration 0029:
entity_key_hold locks the slot FOR UPDATE, which no share lock joins (the share lock here
skips the locked slot; without SKIP LOCKED it would wait for the held job, and delay only
itself)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from helpers.stores import SyncStore
from skiplock import App

from .test_stranger_locks import connect, enqueue


def test_a_passing_share_lock_on_the_key_slots_does_not_free_a_running_key(
    app: App, store: SyncStore
) -> None:
    keyed = enqueue(app, "q", 2, entity_key="k")
    free = enqueue(app, "q", 3)
    with connect(app) as held, connect(app) as leased:
        job = store.job_claim_held(held, ["q"], "w1", 30.0)
        assert job is not None and job.id == keyed[0]
        with psycopg.connect(app.dsn, autocommit=True) as sharer, sharer.transaction():
            sharer.execute(
                sql.SQL("SELECT FROM {} FOR KEY SHARE SKIP LOCKED").format(
                    sql.Identifier(app.schema, "held_key_slots")
                )
            )
        jobs = store.job_claim(leased, ["q"], 10, "w2", 30.0)
        assert sorted(j.id for j in jobs) == free
