-- What a task returned, as JSON, for tasks registered with store_result=True (NULL otherwise,
-- and for jobs not done).  Nullable and without a default: adding it rewrites no rows.
ALTER TABLE {schema}.jobs ADD COLUMN result jsonb;
ALTER TABLE {schema}.jobs_archive ADD COLUMN result jsonb;
