-- Entity keys of running held-lock jobs.  Such a job's row is running only inside its own
-- transaction (every other session sees it pending), so a claim of another job of its key
-- would pass the unique index check of running keys only after waiting for that transaction
-- to end.  The held-lock claim therefore also takes an exclusive advisory lock on its job's
-- key (entity_key_hold), and claims pass over a key whose lock is held, without waiting: a
-- held-lock claim over a key anyone holds (entity_key_held), a leased claim over a key a worker
-- holds (entity_key_locked_by_worker), as it would a committed running job.  The key is hashtext of the entity key in a class per schema.

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

-- Whether a login may write the jobs table, by its own privileges or by those of any role it
-- is a member of (a NOINHERIT worker login that sets the worker role too): where skiplock
-- reads pg_locks, only such sessions' locks count as a worker's; a stranger's count for
-- nothing.
CREATE FUNCTION {schema}.may_write_jobs(login oid) RETURNS boolean
    LANGUAGE sql STABLE
AS $$
    -- Its own or inherited privileges first: the common case, without reading pg_roles.
    SELECT has_table_privilege(login, '{schema}.jobs', 'UPDATE')
        OR EXISTS (SELECT 1 FROM pg_roles AS r
                   WHERE pg_has_role(login, r.oid, 'MEMBER')
                     AND has_table_privilege(r.oid, '{schema}.jobs', 'UPDATE'))
$$;

-- Whether the session holding the lock of an entity key may write the jobs table (a held-lock
-- worker): asked by a leased claim only when entity_key_held found the lock taken.  A
-- stranger's lock on the key (any login can take an advisory lock) counts for nothing there:
-- only held-lock claims, which must take the key themselves, wait for it to be let go.
-- PL/pgSQL, so that its query is planned when first run, not with every claim.
CREATE FUNCTION {schema}.entity_key_locked_by_worker(schema_name text, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.mode = 'ExclusiveLock'
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = hashtext('skiplock_held_key/' || schema_name)::oid
          AND l.objid = hashtext(key)::oid
          AND {schema}.may_write_jobs(a.usesysid));
END
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
