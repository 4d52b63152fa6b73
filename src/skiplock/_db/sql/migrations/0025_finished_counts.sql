-- Counts for the dashboard's charts of the finished jobs that leave the jobs table (deleted or
-- archived on completion, pruned, bulk-deleted), written by the statement that removes them,
-- so a job is charted exactly once: from its row while it is in the table, from these counts
-- once it left (docs/design.md, "Dashboard charts: an index-only read, and the jobs that left
-- the table").  Rows are only inserted, one per statement and queue, never updated: workers
-- finishing jobs of one queue in one minute never wait on each other's row.  The histogram of
-- the wait is two arrays of the row: the buckets that have jobs (finished_wait_bucket) and
-- their counts, so a batch writes one row a queue however spread its waits are.
-- The maintenance leader merges a past minute's rows of a queue into one
-- (job_finished_counts_merge) and deletes rows older than the charts' widest window (a day).
CREATE TABLE {schema}.finished_counts (
    minute timestamptz NOT NULL,  -- the minute the jobs finished in
    queue text NOT NULL,
    done int NOT NULL,
    failed int NOT NULL,
    wait_sum float8 NOT NULL,     -- seconds
    wait_max float8 NOT NULL,
    buckets smallint[] NOT NULL,  -- of the wait, ascending
    counts int[] NOT NULL         -- the jobs in each of those buckets
);
CREATE INDEX finished_counts_minute_idx ON {schema}.finished_counts (minute);

-- The bucket of a wait in seconds: 0 up to a millisecond, then four a doubling (each bucket's
-- upper bound 2^(1/4) times the one below), the last one open; the charts' percentile of the
-- wait is the upper bound of the bucket it falls in.  Inlined by the planner (SQL, immutable).
CREATE FUNCTION {schema}.finished_wait_bucket(wait float8) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN wait <= 0.001 THEN 0
                  ELSE least(ceil(4 * ln(wait / 0.001) / ln(2)), 160)::int END $$;
