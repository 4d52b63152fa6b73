-- Entity keys of running held-lock jobs, marked by a row lock only a worker can take (issue
-- 41).  Migration 0016 marked them with an advisory lock, which any login that may connect can
-- take too: a stranger holding a key's lock kept that key's held-lock jobs waiting.  Taking a
-- row lock needs UPDATE on the table, which only the worker role has here (and its owner).
-- The key is hashed into one of 65536 slots, rows written once here and never updated: a
-- held-lock claim locks its key's slot (FOR NO KEY UPDATE) until its transaction ends, and a
-- claim passes over a key whose slot a transaction in progress has locked.  The probe reads
-- the slot's xmax, the last locker, and asks whether it is still in progress: it takes no lock
-- and leaves nothing behind.  Two keys of one slot delay each other, as two keys of one hash
-- did (docs/design.md, "Entity keys of held-lock jobs: row locks in slots").  Row -1 says
-- whether any does: each held-lock claim of a keyed job shares it (FOR KEY SHARE), and a leased
-- claim reads the slots only while one does (keys_idle in job_claim).  The functions keep
-- their names and arguments (the schema's name is no longer used), so every claim statement,
-- of this version and of the last, reads the new mark.
CREATE TABLE {schema}.held_key_slots (slot int PRIMARY KEY);
INSERT INTO {schema}.held_key_slots (slot) SELECT generate_series(-1, 65535);

-- Whether a transaction in progress holds the slot of an entity key.  The slot's xmax is a
-- 32-bit transaction id: it is widened to the 64-bit one pg_xact_status reads, the one
-- nearest to the snapshot's horizon (a locker is never 2^31 transactions old: vacuum freezes
-- the row first).  Only held-lock claims lock a key's slot, one at a time, so its xmax is
-- never a multixact (row -1, which many share, is never read here).  PL/pgSQL, as
-- entity_key_running (migration 0004): its query is planned once a session (as SQL, the
-- function could not be inlined and cost more per call).
CREATE OR REPLACE FUNCTION {schema}.entity_key_held(schema_name text, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    locker bigint;
    horizon bigint;
BEGIN
    SELECT s.xmax::text::bigint INTO locker FROM {schema}.held_key_slots AS s
    WHERE s.slot = hashtext(key) & 65535;
    IF locker IS NULL OR locker = 0 THEN
        RETURN false;
    END IF;
    horizon := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
    locker := locker - (horizon & 4294967295);
    IF locker >= 2147483648 THEN
        locker := locker - 4294967296;
    ELSIF locker < -2147483648 THEN
        locker := locker + 4294967296;
    END IF;
    RETURN coalesce(pg_xact_status((horizon + locker)::text::xid8) = 'in progress', false);
END
$$;

-- The slot lock is a worker's by construction (no other role may lock the table's rows): a
-- leased claim asks the same question as a held-lock one.
CREATE OR REPLACE FUNCTION {schema}.entity_key_locked_by_worker(schema_name text, key text)
    RETURNS boolean
    LANGUAGE sql VOLATILE
AS $$
    SELECT {schema}.entity_key_held(schema_name, key)
$$;

-- Lock the slot of an entity key until the transaction ends (a held-lock claim, for its job's
-- key), or refuse as the unique index of running keys would, at once: another claim took the
-- slot since this one's check, and the caller claims again.
CREATE OR REPLACE FUNCTION {schema}.entity_key_hold(schema_name text, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF key IS NULL THEN
        RETURN true;
    END IF;
    -- Row -1 first (see keys_idle in job_claim): a leased claim holds it for its own short
    -- transaction at most, and no login but a worker's may lock it.
    PERFORM FROM {schema}.held_key_slots WHERE slot = -1 FOR KEY SHARE;
    PERFORM FROM {schema}.held_key_slots WHERE slot = hashtext(key) & 65535
        FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN true;
    END IF;
    RAISE unique_violation
        USING MESSAGE = format('entity key %L: another transaction holds its slot', key);
END
$$;

-- The roles that may update jobs (the worker role of `skiplock roles`, made before this
-- migration) get the slots now: without them, every claim of a keyed job would fail until the
-- roles were made again.  A role that may not update jobs gets nothing.
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
        EXECUTE format('GRANT SELECT, UPDATE ON TABLE {schema}.held_key_slots TO %s', grantee);
    END LOOP;
END
$$;
