-- A job's fair_key: jobs with the same key share the throughput of their queue (and priority)
-- equally with the jobs of other keys.  The share is given at enqueue, not by the claim: a job
-- due now gets, as its run_at, its key's next turn (fair_key_turn below), so the claim keeps
-- its one statement and its one index (docs/design.md, "Fair shares: a fair_key's turn").
ALTER TABLE {schema}.jobs ADD COLUMN fair_key text;
ALTER TABLE {schema}.jobs_archive ADD COLUMN fair_key text;
-- As the other keys (migration 0015): 1-512 characters on the rows a worker may claim.  Every
-- row has NULL here yet, so the constraint is valid at once.
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_bound_fair_key
    CHECK (status NOT IN ('waiting', 'scheduled', 'pending')
           OR char_length(fair_key) BETWEEN 1 AND 512);

-- Only keyed pending jobs are in these: a table without keyed jobs pays nothing for them.
-- The head of a queue's keyed jobs (its first turn), and the last turn given to each key.
CREATE INDEX jobs_fair_head_idx ON {schema}.jobs (queue, priority, run_at)
    WHERE status = 'pending' AND fair_key IS NOT NULL;
CREATE INDEX jobs_fair_key_idx ON {schema}.jobs (queue, priority, fair_key, run_at)
    WHERE status = 'pending' AND fair_key IS NOT NULL;

-- The run_at of the next turn of key k in queue q, priority p: the oldest keyed pending job's
-- of (q, p) -- the turn being served, which a key without pending jobs shares -- or one
-- microsecond after the last turn given to k (its pending job of the latest run_at), whichever
-- is later.  NULL when (q, p) has no keyed pending job: the job takes now().  Two index probes.  SECURITY DEFINER: the enqueuer
-- role may not read other jobs' run_at or keys (docs/security.md); this returns one time.
-- STABLE: it sees the statement's snapshot, so jobs of one statement are given their turns
-- apart by the statement itself (a rank per key).
CREATE FUNCTION {schema}.fair_key_turn(q text, p int, k text) RETURNS timestamptz
    LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head timestamptz;
    last timestamptz;
BEGIN
    SELECT run_at INTO head FROM {schema}.jobs
    WHERE status = 'pending' AND fair_key IS NOT NULL AND queue = q AND priority = p
    ORDER BY run_at LIMIT 1;
    IF head IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT run_at INTO last FROM {schema}.jobs
    WHERE status = 'pending' AND fair_key IS NOT NULL AND queue = q AND priority = p
      AND fair_key = k
    ORDER BY run_at DESC LIMIT 1;
    RETURN greatest(head, last + interval '1 microsecond');
END
$$;

-- A job's limit_key (a tenant, an API token): limits set on a key's value in key_limits hold
-- for all its jobs together, whatever their task and queue, across every worker: at most
-- concurrency_limit of them running, at most rate_limit starts per rate_period seconds (a
-- bucket, as a queue's: migration 0007).  Jobs whose key has a limit are claimed only by
-- job_claim_key_limited, which serialises the claims of each key by a lock on its row here;
-- the other claims pass them over (key_limited).  docs/design.md, "Limits per key".
ALTER TABLE {schema}.jobs ADD COLUMN limit_key text;
ALTER TABLE {schema}.jobs_archive ADD COLUMN limit_key text;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_bound_limit_key
    CHECK (status NOT IN ('waiting', 'scheduled', 'pending')
           OR char_length(limit_key) BETWEEN 1 AND 512);
CREATE TABLE {schema}.key_limits (
    key text PRIMARY KEY CONSTRAINT jobs_bound_key_limits_key
        CHECK (char_length(key) BETWEEN 1 AND 512),
    concurrency_limit integer CHECK (concurrency_limit IS NULL OR concurrency_limit > 0),
    rate_limit integer CHECK (rate_limit IS NULL OR rate_limit > 0),
    rate_period float8 CHECK (rate_period IS NULL OR rate_period > 0),
    rate_tokens float8,
    rate_refilled_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT key_limits_rate_limit_has_a_period CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT key_limits_limit_something
        CHECK (concurrency_limit IS NOT NULL OR rate_limit IS NOT NULL)
);
-- A key's running jobs (its concurrency) and its pending ones in claim order (the claim of a
-- key), in one index of keyed jobs only: each index on jobs costs every plan of a statement
-- on it a little, keyed or not.
CREATE INDEX jobs_limit_key_idx ON {schema}.jobs (limit_key, status, priority, run_at, id)
    WHERE limit_key IS NOT NULL AND status IN ('pending', 'running');

-- Whether a key has limits: the claims other than job_claim_key_limited leave its jobs alone.
-- A function for the reason entity_key_running is one (migration 0004): one probe of the
-- primary key per keyed candidate, planned once per session.
CREATE FUNCTION {schema}.key_limited(k text) RETURNS boolean
    LANGUAGE plpgsql STABLE STRICT
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM {schema}.key_limits WHERE key = k);
END
$$;
