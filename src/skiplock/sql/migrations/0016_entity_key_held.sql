-- Entity keys of running held-lock jobs.  Such a job's row is running only inside its own
-- transaction (every other session sees it pending), so a claim of another job of its key
-- would pass the unique index check of running keys only after waiting for that transaction
-- to end.  The held-lock claim therefore also takes an exclusive advisory lock on its job's
-- key (entity_key_hold), and every claim passes over a key whose lock someone holds
-- (entity_key_held), without waiting: a leased claim as it would a committed running job, a
-- held-lock claim likewise.  The key is hashtext of the entity key in a class per schema.

-- Whether some session (this one aside) holds the lock of an entity key: tried exclusively
-- and given back at once, so the probe leaves nothing behind and never waits.
CREATE FUNCTION {schema}.entity_key_held(schema_name text, key text) RETURNS boolean
    LANGUAGE sql VOLATILE
AS $$
    SELECT CASE WHEN pg_try_advisory_lock(hashtext('skiplock_held_key/' || schema_name),
                                          hashtext(key))
                THEN NOT pg_advisory_unlock(hashtext('skiplock_held_key/' || schema_name),
                                            hashtext(key))
                ELSE true END
$$;

-- Take the lock of an entity key until the transaction ends (a held-lock claim, for its
-- job's key), or refuse as the unique index of running keys would, at once: another claim
-- took the key since this one's check, and the caller claims again.
CREATE FUNCTION {schema}.entity_key_hold(schema_name text, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF key IS NULL
       OR pg_try_advisory_xact_lock(hashtext('skiplock_held_key/' || schema_name), hashtext(key))
    THEN
        RETURN true;
    END IF;
    RAISE unique_violation
        USING MESSAGE = format('entity key %L: another session holds its lock', key);
END
$$;
