-- Running held-lock jobs, marked by row locks only a worker can take (issue 41).  A held-lock
-- job's row looks pending to every other session while its transaction runs it; it was counted
-- and shown running by shared advisory locks its transaction held, keyed by its queue and by
-- the low 32 bits of its id.  Any login that may connect can take those keys exclusively: the
-- worker then could not mark its job, which ran shown pending, lost its progress, and stopped
-- its queue when the queue had a concurrency limit (the count would have missed it).
--
-- One row per (queue, session) of a held-lock worker, written (committed) by the session
-- before its first claim from the queue (session_register_held_runs) and deleted by the
-- maintenance leader once the session is gone.  A held-lock claim locks its session's row of its job's queue (FOR NO
-- KEY UPDATE, which needs UPDATE on the table: only the worker role has it) until its
-- transaction ends: the row's xmax is then that transaction, in progress.  So a queue's
-- running held-lock jobs are its rows whose xmax is in progress, and a job runs held when its
-- row, seen as pending, was updated by such a transaction of its queue (its xmax is the
-- same).  The advisory markers are still taken, for workers of the last version, which count
-- them, and for doctor, which reports a stranger holding them (docs/security.md; docs/design.md,
-- "Running held-lock jobs: row locks of their sessions").
CREATE TABLE {schema}.held_runs (
    queue text NOT NULL,
    pid int NOT NULL,
    PRIMARY KEY (queue, pid)
);

-- Whether a transaction, by its 32-bit id (a row's xmax: 0 when none), is still in progress.
-- Widened to the 64-bit id pg_xact_status reads as entity_key_held does (migration 0020); a
-- plain transaction id, never a multixact: each row of held_runs is locked by its own session
-- only, one transaction at a time.
CREATE FUNCTION {schema}.xact_running(locker xid) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    x bigint := locker::text::bigint;
    horizon bigint;
BEGIN
    IF x IS NULL OR x = 0 THEN
        RETURN false;
    END IF;
    horizon := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
    x := x - (horizon & 4294967295);
    IF x >= 2147483648 THEN
        x := x - 4294967296;
    ELSIF x < -2147483648 THEN
        x := x + 4294967296;
    END IF;
    RETURN coalesce(pg_xact_status((horizon + x)::text::xid8) = 'in progress', false);
END
$$;

-- Lock this session's row of a queue until the transaction ends, inserting it if it is not
-- registered yet (then counted only once this transaction ends, and by every later claim).
-- Only this session ever locks it, so it never waits.  A held-lock claim locks a registered
-- row itself (run_mark in job_claim) and calls this for one that is not.
CREATE FUNCTION {schema}.held_run_mark(queue_name text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM FROM {schema}.held_runs
    WHERE queue = queue_name AND pid = pg_backend_pid() FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        INSERT INTO {schema}.held_runs (queue, pid) VALUES (queue_name, pg_backend_pid())
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN true;
END
$$;

-- Roles made before this migration: those that may update jobs (the worker role) get the
-- rows, and every role that may read jobs reads them (a running held-lock job is shown
-- running by them).
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {schema}.held_runs TO %s',
                       grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = '{schema}.jobs'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT ON TABLE {schema}.held_runs TO %s', grantee);
    END LOOP;
END
$$;
