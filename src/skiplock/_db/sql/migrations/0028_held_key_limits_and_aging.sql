-- Limits per key for held-lock jobs (issue 46).  A running held-lock job's row looks pending
-- to every other session, so its key's count needs a mark: a row lock on one of its key's
-- slots here, as held_runs marks its queue (migration 0024).  A key limited to N running has
-- at least N rows, written when its limit is set (limits_set_for_key) and never updated, so a
-- claim needs no committed row of its session first (nor a pooler's same server session): a
-- held-lock claim of a limited key's job locks a free slot of the key (FOR NO KEY UPDATE SKIP
-- LOCKED, which needs UPDATE: only the worker role has it) until its transaction ends, and the
-- key's count is its leased running jobs plus its slots whose xmax is in progress.  Rows of a
-- lowered or removed limit stay (one may be locked): a job still running in one is counted if
-- the key is limited again.  docs/design.md, "Limits per key in held-lock workers".
CREATE TABLE {schema}.held_key_runs (
    key text NOT NULL,
    slot int NOT NULL,
    PRIMARY KEY (key, slot)
);
INSERT INTO {schema}.held_key_runs (key, slot)
SELECT k.key, s FROM {schema}.key_limits AS k, generate_series(0, k.concurrency_limit - 1) AS s
WHERE k.concurrency_limit IS NOT NULL;

-- Aging (issue 46, item 3): with aging_step set, a queue's pending jobs gain one priority level
-- (a lower number) per aging_step seconds they have been due, applied by the maintenance leader
-- in bounded batches (job_age_pending); the job's priority before its first step is kept in its
-- meta, as "skiplock_aged_from".  NULL, the default: priority is strict.
ALTER TABLE {schema}.queues
    ADD COLUMN aging_step float8 CHECK (aging_step IS NULL OR aging_step > 0);

-- Roles made before this migration: those that may update jobs (the worker role) lock the
-- slots, those that may write key_limits (the admin role) write them, and every role that may
-- read jobs reads them.
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = '{schema}.jobs'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT, UPDATE ON TABLE {schema}.held_key_runs TO %s', grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = '{schema}.key_limits'::regclass AND a.privilege_type = 'INSERT'
          AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON TABLE {schema}.held_key_runs TO %s',
                       grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = '{schema}.jobs'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT ON TABLE {schema}.held_key_runs TO %s', grantee);
    END LOOP;
END
$$;
