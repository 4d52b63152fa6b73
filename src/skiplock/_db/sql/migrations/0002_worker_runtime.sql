-- Shared state of the worker runtime: queue settings, maintenance leadership, periodic ticks,
-- and cancellation requests for running jobs.

-- Queue settings every worker honours: paused queues are not claimed from; a concurrency
-- limit caps the running jobs of the queue across all workers.
CREATE TABLE {schema}.queues (
    name              text        PRIMARY KEY,
    paused            boolean     NOT NULL DEFAULT false,
    concurrency_limit integer     CHECK (concurrency_limit IS NULL OR concurrency_limit > 0),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- One row per maintenance role, held by one worker until expires_at unless renewed.
CREATE TABLE {schema}.leaders (
    role       text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Each tick of each periodic task, with the job it enqueued: the primary key is what makes a
-- tick happen once however many workers see it.
CREATE TABLE {schema}.periodic_ticks (
    name   text        NOT NULL,
    tick   timestamptz NOT NULL,
    job_id bigint,
    PRIMARY KEY (name, tick)
);

-- Set by an admin to cancel a running job; its worker notices on the next heartbeat.
ALTER TABLE {schema}.jobs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;

-- Pruning finished jobs by age.
CREATE INDEX jobs_finished_idx ON {schema}.jobs (finished_at)
    WHERE status IN ('done', 'failed', 'cancelled');
