-- Jobs without an entity key (most jobs) leave the one-running-per-key index alone: before,
-- every claim and every reclaim added an entry for them, though NULL keys never conflict.
CREATE UNIQUE INDEX jobs_one_running_per_entity_key_new ON {schema}.jobs (entity_key)
    WHERE status = 'running' AND entity_key IS NOT NULL;
DROP INDEX {schema}.jobs_one_running_per_entity_key;
ALTER INDEX {schema}.jobs_one_running_per_entity_key_new
    RENAME TO jobs_one_running_per_entity_key;
