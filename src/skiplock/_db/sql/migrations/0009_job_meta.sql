-- Job metadata: a small JSON object set at enqueue that travels with the job but is not its
-- payload (the task never gets it as arguments): a trace context, a request id, tags.  For
-- hooks (App.around_job), ctx.job.meta, the dashboard.  Nullable without a default: adding it
-- rewrites no rows, and a job without meta stores nothing.
ALTER TABLE {schema}.jobs ADD COLUMN meta jsonb;
ALTER TABLE {schema}.jobs_archive ADD COLUMN meta jsonb;
