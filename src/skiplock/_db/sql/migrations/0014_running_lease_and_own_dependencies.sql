-- A running job always has a lease.  Every claim sets locked_until (a held-lock claim too, in
-- its uncommitted version of the row), and the reclaim finds running jobs by it: a running row
-- without one was never reclaimed and held its entity key, and a slot of its queue's
-- concurrency limit, forever.  Such rows left from before get a lease that ends now, so the
-- maintenance leader reclaims them like any expired one.
UPDATE {schema}.jobs
SET locked_until = now(), locked_by = coalesce(locked_by, 'no lease'),
    locked_at = coalesce(locked_at, now())
WHERE status = 'running' AND locked_until IS NULL;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_running_has_lease
    CHECK (status <> 'running' OR locked_until IS NOT NULL) NOT VALID;
ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_running_has_lease;
COMMENT ON COLUMN {schema}.jobs.locked_until IS 'lease expiry of a running job: every running job has one (a held-lock claim too), and the reclaim requeues it once past';

-- A dependency can only be given to a waiting job inserted by the same transaction: enqueue
-- with depends_on inserts the job and its dependencies in one statement.  Anyone allowed to
-- insert dependencies (the enqueuer role) could otherwise make another user's waiting job wait
-- for a failed one, and the maintenance leader would cancel it.  A row is the current
-- transaction's when it is visible and its xmin is still in progress (another transaction's
-- rows are visible only once committed).  The xmin has 32 bits; the transaction's ids (its
-- savepoints' too) are its own top id or later, within 2^31 of it, which widens them to full
-- ids; an xmin that cannot be one of them is another transaction's.  SECURITY DEFINER: the
-- check reads xmin, which the enqueuer role may not.  Once per statement, over the rows it
-- wrote (one join, not a call per row); after the statement, so it sees the jobs inserted
-- earlier in it.
CREATE FUNCTION {schema}.job_dependency_check() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    top bigint := pg_current_xact_id_if_assigned()::text::bigint;
    refused bigint;
BEGIN
    SELECT n.job_id INTO refused
    FROM linked AS n
    LEFT JOIN {schema}.jobs AS j ON j.id = n.job_id AND j.status = 'waiting'
    WHERE NOT CASE WHEN ((j.xmin::text::bigint - top) & 4294967295) < 2147483648
                   THEN pg_xact_status((top + ((j.xmin::text::bigint - top) & 4294967295))
                                       ::text::xid8) = 'in progress'
                   ELSE false END
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job % is not a waiting job inserted by this transaction', refused
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'dependencies are given with enqueue(..., depends_on=...) only';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_dependencies_own_jobs_only AFTER INSERT ON {schema}.job_dependencies
    REFERENCING NEW TABLE AS linked
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.job_dependency_check();
CREATE TRIGGER job_dependencies_own_jobs_only_on_update AFTER UPDATE
    ON {schema}.job_dependencies
    REFERENCING NEW TABLE AS linked
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.job_dependency_check();
