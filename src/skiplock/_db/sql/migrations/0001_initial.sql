-- The jobs table, its claim index and the archive for finished jobs.
--
-- status: scheduled (run_at in the future) -> pending (due, claimable) -> running (claimed)
--         -> done | failed | cancelled.  Only 'pending' rows are in the claim index, so the
--         claim never walks past future or finished rows.
CREATE TABLE {schema}.jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue           text        NOT NULL,
    task            text        NOT NULL,
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('scheduled', 'pending', 'running', 'done', 'failed', 'cancelled')),
    priority        integer     NOT NULL DEFAULT 0,
    run_at          timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts    integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    locked_by       text,
    locked_at       timestamptz,
    locked_until    timestamptz,
    entity_key      text,
    idempotency_key text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);

COMMENT ON COLUMN {schema}.jobs.priority IS 'lower runs first';
COMMENT ON COLUMN {schema}.jobs.attempts IS 'claims so far; with locked_by it is the ownership token of the current claim';
COMMENT ON COLUMN {schema}.jobs.locked_until IS 'lease expiry; NULL while a worker holds the row lock for the whole job';

-- The claim reads this index only: one queue, best priority first, oldest first.
CREATE INDEX jobs_claim_idx ON {schema}.jobs (queue, priority, run_at, id)
    WHERE status = 'pending';

-- Promotion of scheduled jobs that became due.
CREATE INDEX jobs_scheduled_idx ON {schema}.jobs (run_at)
    WHERE status = 'scheduled';

-- Reclaim of expired leases.
CREATE INDEX jobs_running_idx ON {schema}.jobs (locked_until)
    WHERE status = 'running';

-- At most one running job per entity key.
CREATE UNIQUE INDEX jobs_one_running_per_entity_key ON {schema}.jobs (entity_key)
    WHERE status = 'running';

-- At most one unfinished job per idempotency key.
CREATE UNIQUE INDEX jobs_unfinished_idempotency_key ON {schema}.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('scheduled', 'pending', 'running');

-- A queue table churns: vacuum and analyze it after a few percent of changes, without throttling.
ALTER TABLE {schema}.jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Finished jobs moved out of the hot table when completion is 'archive'.
CREATE TABLE {schema}.jobs_archive (
    id              bigint      PRIMARY KEY,
    queue           text        NOT NULL,
    task            text        NOT NULL,
    payload         jsonb       NOT NULL,
    status          text        NOT NULL,
    priority        integer     NOT NULL,
    run_at          timestamptz NOT NULL,
    attempts        integer     NOT NULL,
    max_attempts    integer     NOT NULL,
    locked_by       text,
    entity_key      text,
    idempotency_key text,
    last_error      text,
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz NOT NULL
);
