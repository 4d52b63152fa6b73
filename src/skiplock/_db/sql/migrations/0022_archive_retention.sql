-- The archive's retention: the maintenance leader deletes archived jobs finished longer ago
-- than the app's retention['archive'], oldest first in bounded batches (job_archive_prune),
-- and the doctor reads the oldest one's age; both walk this index from its low end.  An
-- archive turned into daily partitions (`skiplock archive partition`) is pruned by dropping
-- whole partitions instead (docs/design.md, "An archive that stays healthy").
CREATE INDEX jobs_archive_finished_idx ON {schema}.jobs_archive (finished_at);

-- Daily partitions of the archive, opt-in (`skiplock archive partition`): range partitions on
-- finished_at, one a UTC day, each with its own primary key on id.  Kept by the maintenance
-- leader through this function: it creates the partitions of the next `ahead` days and drops
-- every partition whose range ended more than `older_than` seconds before `at` (NULL: none),
-- the legacy partition (the rows of the archive before it was partitioned) included.
-- Returns whether the archive is partitioned and what was created and dropped.  SECURITY
-- DEFINER: the worker role has no DDL rights (src/skiplock/_db/sql/roles/grants.sql); this
-- function does this and nothing else, with the schema owner's.  Waits at most 2 s on a
-- lock (dropping a partition locks the archive briefly), retried a minute later.
CREATE FUNCTION {schema}.archive_partitions_keep(ahead int, older_than float8, at timestamptz)
    RETURNS TABLE (partitioned boolean, created text[], dropped text[])
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC' SET lock_timeout = '2s'
AS $$
DECLARE
    parent regclass := to_regclass('{schema}.jobs_archive');
    nsp text := (SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n
                 ON n.oid = c.relnamespace WHERE c.oid = parent);
    day date;
    name text;
    part record;
    made text[] := ARRAY[]::text[];
    gone text[] := ARRAY[]::text[];
BEGIN
    IF (SELECT c.relkind FROM pg_class AS c WHERE c.oid = parent) IS DISTINCT FROM 'p' THEN
        RETURN QUERY SELECT false, made, gone;
        RETURN;
    END IF;
    FOR i IN 0..ahead LOOP
        day := (at AT TIME ZONE 'UTC')::date + i;
        name := 'jobs_archive_p' || to_char(day, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(format('%I.%I', nsp, name)) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s (PRIMARY KEY (id)) '
                           'FOR VALUES FROM (%L) TO (%L)', nsp, name, parent,
                           day::timestamp AT TIME ZONE 'UTC',
                           (day + 1)::timestamp AT TIME ZONE 'UTC');
            made := made || name;
        EXCEPTION WHEN invalid_object_definition THEN
            -- The day lies in the legacy partition's range (before it ends): nothing to make.
            NULL;
        END;
    END LOOP;
    FOR part IN
        SELECT c.relname::text AS relname,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')
                   ::timestamptz AS upper_bound
        FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = parent
        ORDER BY 2
    LOOP
        CONTINUE WHEN part.upper_bound IS NULL  -- the default partition
                   OR older_than IS NULL      -- kept forever
                   OR part.upper_bound > at - make_interval(secs => older_than);
        EXECUTE format('DROP TABLE %I.%I', nsp, part.relname);
        gone := gone || part.relname;
    END LOOP;
    RETURN QUERY SELECT true, made, gone;
END
$$;

-- Only the roles given it (worker and admin: `skiplock roles`) may call it: it deletes.
REVOKE EXECUTE ON FUNCTION {schema}.archive_partitions_keep(int, float8, timestamptz) FROM PUBLIC;

-- Turn the plain archive into a partitioned one, second step (the first adds and validates
-- the constraint jobs_archive_legacy_bound, finished_at < `cutoff`, without blocking writes):
-- the plain table becomes the partition jobs_archive_legacy, for everything finished before
-- `cutoff` (attached without a scan: the validated constraint proves it), under a new
-- partitioned jobs_archive with the same columns and grants, a default partition (so that an
-- insert never fails for want of a partition) and the daily partitions from `cutoff` on.
-- Holds the archive's lock only for these catalog changes.  Returns the cutoff.
CREATE FUNCTION {schema}.archive_partition_swap(cutoff timestamptz, ahead int)
    RETURNS timestamptz
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC'
AS $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n
                 ON n.oid = c.relnamespace WHERE c.oid = to_regclass('{schema}.jobs_archive'));
    legacy text;
    grant_row record;
BEGIN
    EXECUTE format('ALTER TABLE %I.jobs_archive RENAME TO jobs_archive_legacy', nsp);
    EXECUTE format('ALTER INDEX %I.jobs_archive_pkey RENAME TO jobs_archive_legacy_pkey', nsp);
    EXECUTE format('ALTER INDEX %I.jobs_archive_finished_idx '
                   'RENAME TO jobs_archive_legacy_finished_idx', nsp);
    legacy := format('%I.jobs_archive_legacy', nsp);
    EXECUTE format('CREATE TABLE %I.jobs_archive (LIKE %s INCLUDING DEFAULTS) '
                   'PARTITION BY RANGE (finished_at)', nsp, legacy);
    EXECUTE format('CREATE INDEX jobs_archive_finished_idx ON %I.jobs_archive (finished_at)', nsp);
    EXECUTE format('ALTER TABLE %I.jobs_archive ATTACH PARTITION %s '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', nsp, legacy, cutoff);
    EXECUTE format('CREATE TABLE %I.jobs_archive_default PARTITION OF %I.jobs_archive '
                   '(PRIMARY KEY (id)) DEFAULT', nsp, nsp);
    -- The roles' grants (`skiplock roles`), table-wide and on columns, as the plain table had.
    FOR grant_row IN
        SELECT a.privilege_type, a.grantee FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = legacy::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON %I.jobs_archive TO %s', grant_row.privilege_type, nsp,
                       CASE WHEN grant_row.grantee = 0 THEN 'PUBLIC'
                            ELSE quote_ident(pg_get_userbyid(grant_row.grantee)) END);
    END LOOP;
    FOR grant_row IN
        SELECT at.attname, a.privilege_type, a.grantee
        FROM pg_attribute AS at, aclexplode(at.attacl) AS a
        WHERE at.attrelid = legacy::regclass AND at.attacl IS NOT NULL
    LOOP
        EXECUTE format('GRANT %s (%I) ON %I.jobs_archive TO %s', grant_row.privilege_type,
                       grant_row.attname, nsp,
                       CASE WHEN grant_row.grantee = 0 THEN 'PUBLIC'
                            ELSE quote_ident(pg_get_userbyid(grant_row.grantee)) END);
    END LOOP;
    PERFORM {schema}.archive_partitions_keep(ahead, NULL, cutoff);
    RETURN cutoff;
END
$$;

-- Turn the plain archive into a partitioned one, first step: the constraint that proves
-- every row belongs before `cutoff`, NOT VALID (checked for new rows only: a brief lock);
-- validated next, by a scan that does not block writes (docs/design.md, "An archive that
-- stays healthy").  Refuses an archive already partitioned.
CREATE FUNCTION {schema}.archive_partition_bound(cutoff timestamptz)
    RETURNS timestamptz
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (SELECT c.relkind FROM pg_class AS c
        WHERE c.oid = to_regclass('{schema}.jobs_archive')) = 'p' THEN
        RAISE EXCEPTION 'the archive is partitioned already' USING ERRCODE = 'object_in_use';
    END IF;
    ALTER TABLE {schema}.jobs_archive DROP CONSTRAINT IF EXISTS jobs_archive_legacy_bound;
    EXECUTE format('ALTER TABLE {schema}.jobs_archive ADD CONSTRAINT jobs_archive_legacy_bound '
                   'CHECK (finished_at < %L) NOT VALID', cutoff);
    RETURN cutoff;
END
$$;
