-- Whether an entity key has a running job, for the claims' entity-key check.  As a subquery
-- in the claim, the check was planned again at every claim (docs/design.md, "The entity-key
-- check as a function"), and for a batch claim the planner chose to read every running job's key into
-- a hash first: a claim's cost then grew with the number of running jobs (and with the dead
-- index entries of jobs that finished since the last vacuum).  A PL/pgSQL function plans its
-- query once per session, and each call is one probe of the unique index of running keys.
-- STABLE: it sees the claim's snapshot, as the subquery did.
CREATE FUNCTION {schema}.entity_key_running(key text) RETURNS boolean
    LANGUAGE plpgsql STABLE STRICT
AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM {schema}.jobs WHERE status = 'running' AND entity_key = key
    );
END
$$;
