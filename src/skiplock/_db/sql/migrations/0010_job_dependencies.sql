-- Jobs that run after others: a job enqueued with depends_on is 'waiting' until every job it
-- depends on is done (then pending, or scheduled until its run_at), or cancelled when one of
-- them failed or was cancelled.  The maintenance leader decides (job_release_waiting).
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_status_check CHECK (status IN (
    'waiting', 'scheduled', 'pending', 'running', 'done', 'failed', 'cancelled')) NOT VALID;
ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_status_check;

-- What each waiting job waits for; its rows go when it is released or cancelled.  No foreign
-- keys: a job it depends on may be archived or deleted when done (counted as done), and a
-- foreign key would put a trigger on every delete of a finished job.
CREATE TABLE {schema}.job_dependencies (
    job_id     bigint NOT NULL,
    depends_on bigint NOT NULL,
    PRIMARY KEY (job_id, depends_on)
);

-- The release reads the waiting jobs in id order, a batch at a time.
CREATE INDEX jobs_waiting_idx ON {schema}.jobs (id) WHERE status = 'waiting';

-- A waiting job holds its idempotency key like any unfinished job.
CREATE UNIQUE INDEX jobs_unfinished_idempotency_key_new ON {schema}.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL
      AND status IN ('waiting', 'scheduled', 'pending', 'running');
DROP INDEX {schema}.jobs_unfinished_idempotency_key;
ALTER INDEX {schema}.jobs_unfinished_idempotency_key_new
    RENAME TO jobs_unfinished_idempotency_key;
