-- The progress a running job reports (ctx.progress): a fraction in 0..1 and a short status,
-- one row a job, written by its worker at most once a second (docs/design.md, "Progress of a
-- running job: a side table").  A side table and not columns of jobs: a held-lock job's row
-- is locked by the transaction that runs it, where a write is seen by no one until it commits,
-- and a write from another session would wait for that lock; here a side connection writes
-- freely, after checking that the claim still owns the job.  UNLOGGED: progress is a live
-- view, worth no WAL; a crash empties it (the jobs go on and report again), and a replica
-- does not see it.  No foreign key: its KEY SHARE lock would wait on a held-lock job's row.
-- A row is shown while it belongs to the job's running attempt; rows of finished jobs are
-- pruned by the maintenance leader (job_progress_prune).
CREATE UNLOGGED TABLE {schema}.job_progress (
    job_id bigint PRIMARY KEY,
    attempt int NOT NULL,
    worker text NOT NULL,
    progress float8 NOT NULL,
    status text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT jobs_bound_progress CHECK (progress >= 0 AND progress <= 1),
    CONSTRAINT jobs_bound_progress_status CHECK (char_length(status) <= 200)
);
