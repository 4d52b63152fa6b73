-- Starts of held-lock jobs, committed apart from the job's own transaction.  A held-lock job's
-- claim, attempt count and outcome live in one transaction, so a worker process that dies
-- while the job runs (a crash, an out-of-memory kill, a lost machine) leaves no trace on the
-- job's row: without this record such a job would run again with the same attempt, forever.
-- row_xmin is the transaction that wrote the version of the job's row the start claimed: a
-- later start from the same version means the earlier one died before writing anything.
CREATE TABLE {schema}.held_starts (
    job_id   bigint      PRIMARY KEY,
    row_xmin bigint      NOT NULL,
    starts   integer     NOT NULL,
    last_at  timestamptz NOT NULL DEFAULT now()
);
