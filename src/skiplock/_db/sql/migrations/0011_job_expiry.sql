-- Jobs that expire: enqueued with expires, a job not started by expires_at is never claimed
-- and is cancelled (by the maintenance leader, job_cancel_expired).  Nullable without a
-- default: adding it rewrites no rows, and jobs without an expiry stay out of the index.
ALTER TABLE {schema}.jobs ADD COLUMN expires_at timestamptz;
ALTER TABLE {schema}.jobs_archive ADD COLUMN expires_at timestamptz;
CREATE INDEX jobs_expiring_idx ON {schema}.jobs (expires_at)
    WHERE expires_at IS NOT NULL AND status IN ('waiting', 'scheduled', 'pending');
