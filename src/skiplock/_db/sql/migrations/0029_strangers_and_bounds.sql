-- What one job, one producer or one worker-role session may do to the others (issue 41).

-- A fair_key turn (migration 0027) no longer follows a pending row run_at into the future.
-- A pending row is due: a claim takes it whatever its run_at, and enqueue writes a row whose
-- run_at is ahead as scheduled.  But a producer writing SQL (the enqueuer role may insert a
-- pending row) could give a keyed pending row a run_at of year 9999: as the head of its queue
-- turns, it gave that run_at to every other key job of its queue and priority, which then came
-- after every unkeyed job and never aged; and a run_at of 1970 (enqueue takes any past
-- run_at) gave the other keys turns in 1970, before every unkeyed job however long it had
-- waited, and aged them at once.  So a keyed pending row's turn is counted from now(), never
-- from the run_at it was given, and the head taken is never later than now(): a row written
-- before this migration delays no other key.  A key turns still go one microsecond apart, so
-- a key with many pending jobs has its last turns ahead of now(), as before.
CREATE OR REPLACE FUNCTION {schema}.fair_key_take_turn() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head timestamptz;
    last timestamptz;
BEGIN
    NEW.run_at := now();
    SELECT run_at INTO head FROM {schema}.jobs
    WHERE status = 'pending' AND fair_key IS NOT NULL AND queue = NEW.queue
      AND priority = NEW.priority
    ORDER BY run_at LIMIT 1;
    IF head IS NOT NULL THEN
        SELECT run_at INTO last FROM {schema}.jobs
        WHERE status = 'pending' AND fair_key IS NOT NULL AND queue = NEW.queue
          AND priority = NEW.priority AND fair_key = NEW.fair_key
        ORDER BY run_at DESC LIMIT 1;
        NEW.run_at := greatest(least(head, now()), last + interval '1 microsecond');
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION {schema}.fair_key_take_turn() FROM PUBLIC;
-- Keyed pending rows written before with a run_at more than a day ahead are due now: no key
-- takes turns that far ahead (a microsecond a pending job), so only a row written by hand does,
-- and it held its key turns there.  Rows another transaction holds (a running held-lock job)
-- are left as they are, not waited for.
UPDATE {schema}.jobs SET run_at = now()
WHERE id IN (SELECT id FROM {schema}.jobs
             WHERE status = 'pending' AND fair_key IS NOT NULL
               AND run_at > now() + interval '1 day'
             FOR UPDATE SKIP LOCKED);

-- The slot of a running held-lock job entity key is locked FOR UPDATE (it was FOR NO KEY
-- UPDATE, migration 0020), which no other row lock shares.  A KEY SHARE lock of any other
-- worker-role session (a diagnostic query, however brief) joined the claim lock: the slot xmax
-- became a multixact, which entity_key_held does not read, so the key looked free for the rest
-- of the job run, and a leased claim of its queue took the key next job and waited on the
-- unique index of running keys until its lock_timeout, claim after claim, its whole batch with
-- it.  Now such a session waits for the slot, or, holding it first, makes the key look held
-- while it does: either delays only the keys of that slot.
CREATE OR REPLACE FUNCTION {schema}.entity_key_hold(schema_name text, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF key IS NULL THEN
        RETURN true;
    END IF;
    -- Row -1 first (see keys_idle in job_claim): a leased claim holds it for its own short
    -- transaction at most, and no login but a worker may lock it.  Shared by every held-lock
    -- claim of a keyed job, so a multixact: only whether it is free is asked of it.
    PERFORM FROM {schema}.held_key_slots WHERE slot = -1 FOR KEY SHARE;
    PERFORM FROM {schema}.held_key_slots WHERE slot = hashtext(key) & 65535
        FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN true;
    END IF;
    RAISE unique_violation
        USING MESSAGE = format('entity key %L: another transaction holds its slot', key);
END
$$;

-- The row of held_runs that marks a session running held-lock jobs of a queue (migration 0024)
-- is locked FOR UPDATE here too, as the claims lock it themselves (run_mark in job_claim): a
-- KEY SHARE lock of another worker-role session joined FOR NO KEY UPDATE, the row xmax became a
-- multixact, which xact_running does not read, and a running held-lock job of a limited key
-- (job_claim_one_held_of_key calls this) showed pending for the rest of its run.
CREATE OR REPLACE FUNCTION {schema}.held_run_mark(queue_name text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM FROM {schema}.held_runs
    WHERE queue = queue_name AND pid = pg_backend_pid() FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO {schema}.held_runs (queue, pid) VALUES (queue_name, pg_backend_pid())
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN true;
END
$$;

-- A queue aging step (migration 0028) within what the leader can run: at most 1e9 seconds
-- (bounds.AGING_STEP_MAX), a finite number (NaN and Infinity passed the check of 0028, as
-- float8 orders them above every number).  The leader aging statement takes the step as an
-- interval back from now(): 1e300 failed that statement, for every queue after it too.  A step
-- set beyond the bound before this migration ages no job in a lifetime: it becomes the bound.
UPDATE {schema}.queues SET aging_step = 1e9 WHERE aging_step > 1e9;
ALTER TABLE {schema}.queues ADD CONSTRAINT queues_bound_aging_step
    CHECK (aging_step IS NULL OR aging_step > 0 AND aging_step <= 1e9);
