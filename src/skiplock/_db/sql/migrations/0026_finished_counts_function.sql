-- The one place that counts finished jobs leaving the jobs table for the dashboard's charts
-- (finished_counts, migration 0025).  Each statement that removes finished jobs passes the
-- removed rows' finish time, queue, status and wait (seconds) as four arrays of one length;
-- this inserts one row per minute and queue of those done or failed within the charts' widest
-- window (a day), the wait's histogram as two arrays, and returns how many rows it inserted.
-- STRICT: a statement that removed nothing passes NULLs (array_agg of no rows) and the call is
-- skipped.  PL/pgSQL: the INSERT is planned once per session, not at every call.  The caller's
-- rights (not SECURITY DEFINER): who may not insert into finished_counts may not through this.
CREATE FUNCTION {schema}.finished_counts_add(finished_ats timestamptz[], queues text[],
                                             statuses text[], waits float8[]) RETURNS int
    LANGUAGE plpgsql STRICT
AS $$
DECLARE
    inserted int;
BEGIN
    INSERT INTO {schema}.finished_counts (minute, queue, done, failed, wait_sum, wait_max,
                                          buckets, counts)
    SELECT minute, q, sum(done), sum(failed), sum(wait_sum), max(wait_max),
           array_agg(bucket ORDER BY bucket), array_agg(done + failed ORDER BY bucket)
    FROM (SELECT date_trunc('minute', f) AS minute, q, {schema}.finished_wait_bucket(w) AS bucket,
                 count(*) FILTER (WHERE s = 'done') AS done,
                 count(*) FILTER (WHERE s = 'failed') AS failed,
                 sum(w) AS wait_sum, max(w) AS wait_max
          FROM unnest(finished_ats, queues, statuses, waits) AS r(f, q, s, w)
          WHERE s IN ('done', 'failed') AND f > now() - interval '1 day'
          GROUP BY 1, 2, 3) AS per_bucket
    GROUP BY 1, 2;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    RETURN inserted;
END
$$;
