"""The seed design's jobs table and its partial claim index, in raw SQL: what the pgbench
ceiling (:mod:`bench.ceiling`) and the latency floor (:class:`bench.systems.SqlFloor`, whose
worker is ``bench/apps/sql_floor_worker.py``) both run on."""

from __future__ import annotations

TABLE = """
CREATE TABLE ceiling_jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload      jsonb       NOT NULL,
    status       text        NOT NULL DEFAULT 'pending',
    priority     integer     NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    locked_at    timestamptz,
    locked_by    text,
    locked_until timestamptz,
    last_error   text
);
CREATE INDEX ceiling_jobs_claim_idx ON ceiling_jobs (priority, run_at) WHERE status = 'pending';
"""
