-- Statements an operator runs on jobs: list them, retry failed ones, cancel unstarted ones, ask
-- running ones to stop; one job by id, or every job matching filters (NULL = any), in batches.
-- Placeholders as in jobs.sql.
--
-- A bulk change goes through the matching jobs in id order, %(batch)s at a time from
-- %(after_id)s, each batch a statement (and a transaction) of its own: a million failed jobs are
-- retried without one long transaction holding back vacuum or piling up WAL, and the rows each
-- batch locks are few.  SKIP LOCKED: a row another session has locked is left alone, never
-- waited on (for a pending-looking row, that session is a held-lock worker running the job, or
-- a claim taking it).

-- name: job_list
-- Admin: jobs filtered by queue, status and task (NULL = any), newest first, the done jobs
-- moved to the archive (completion 'archive') included; with %(before)s, only jobs with a
-- smaller id (the next page).  PostgreSQL pushes the filters into both tables and merges
-- their primary keys read newest first.  A running held-lock job, whose row looks pending, is
-- listed running (see job_get).
WITH held_runs AS MATERIALIZED (
    -- The transactions running held-lock jobs, with their queues (see job_get in jobs.sql).
    SELECT h.queue, h.xmax FROM {held_runs} AS h WHERE {xact_running}(h.xmax)
)
SELECT * FROM (
    SELECT id, queue, task, payload,
           CASE WHEN status = 'pending' AND EXISTS (
                    SELECT FROM held_runs AS h WHERE h.queue = j.queue AND h.xmax = j.xmax)
                THEN 'running' ELSE status END AS status,
           priority, run_at, attempts, max_attempts,
           locked_by, locked_until, locked_at, entity_key, idempotency_key, created_at, meta,
           expires_at, last_error, finished_at, result
    FROM {jobs} AS j
    UNION ALL
    SELECT id, queue, task, payload, status, priority, run_at, attempts, max_attempts,
           locked_by, NULL::timestamptz, NULL::timestamptz, entity_key, idempotency_key,
           created_at, meta, expires_at, last_error, finished_at, result
    FROM {archive}
) AS listed
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_count_matching
-- Admin: how many jobs of each of %(statuses)s match the filters (what a bulk change would touch).
SELECT status, count(*) FROM {jobs}
WHERE status = ANY(%(statuses)s::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
  AND (%(finished_within)s::float8 IS NULL
       OR finished_at > now() - make_interval(secs => %(finished_within)s))
  AND (%(older_than)s::float8 IS NULL
       OR finished_at <= now() - make_interval(secs => %(older_than)s))
GROUP BY status;

-- name: job_retry_failed
-- Admin: give a failed (or cancelled) job one more attempt, now, unless an unfinished job holds
-- its idempotency key (the unique index would refuse the row).  No row: the job is not failed or
-- cancelled.  Else its id, the job holding its key (NULL: retried) and the key.
WITH target AS (
    SELECT id, idempotency_key FROM {jobs}
    WHERE id = %(id)s AND status IN ('failed', 'cancelled')
    FOR UPDATE
), holder AS (
    SELECT u.id FROM {jobs} AS u, target
    WHERE u.idempotency_key = target.idempotency_key
      AND u.status IN ('waiting', 'scheduled', 'pending', 'running')
    LIMIT 1
), retried AS (
    UPDATE {jobs} AS j
    SET status = 'pending', run_at = now(), finished_at = NULL, cancel_requested = false,
        max_attempts = greatest(j.max_attempts, j.attempts + 1)
    FROM target
    WHERE j.id = target.id AND NOT EXISTS (SELECT 1 FROM holder)
    RETURNING j.queue
)
SELECT target.id, (SELECT id FROM holder), target.idempotency_key,
       (SELECT count(pg_notify(%(channel)s, queue)) FROM retried)
FROM target;

-- name: job_retry_many
-- Admin: give the jobs in %(statuses)s (failed, cancelled) matching the filters one more attempt,
-- now; one batch.  Of the jobs of a batch sharing an idempotency key only the newest is retried,
-- and none while an unfinished job holds the key: those stay as they are (skipped), like the jobs
-- migration 0015 found breaking a bound of the table (a retry would be refused).  Returns
-- the jobs looked at, the last id looked at and the jobs retried; one NOTIFY per queue.
WITH candidates AS (
    SELECT id, idempotency_key,
           coalesce(last_error, '') LIKE 'InvalidPayload: this job breaks the bound %%' AS broken
    FROM {jobs}
    WHERE id > %(after_id)s
      AND status = ANY(%(statuses)s::text[])
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(finished_within)s::float8 IS NULL
           OR finished_at > now() - make_interval(secs => %(finished_within)s))
      AND (%(older_than)s::float8 IS NULL
           OR finished_at <= now() - make_interval(secs => %(older_than)s))
    ORDER BY id
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), newest_per_key AS (
    SELECT DISTINCT ON (idempotency_key) id, idempotency_key
    FROM candidates WHERE idempotency_key IS NOT NULL AND NOT broken
    ORDER BY idempotency_key, id DESC
), chosen AS (
    SELECT id FROM candidates WHERE idempotency_key IS NULL AND NOT broken
    UNION ALL
    SELECT k.id FROM newest_per_key AS k
    WHERE NOT EXISTS (
        SELECT 1 FROM {jobs} AS u
        WHERE u.idempotency_key = k.idempotency_key
          AND u.status IN ('waiting', 'scheduled', 'pending', 'running'))
), retried AS (
    UPDATE {jobs} AS j
    SET status = 'pending', run_at = now(), finished_at = NULL, cancel_requested = false,
        max_attempts = greatest(j.max_attempts, j.attempts + 1)
    FROM chosen WHERE j.id = chosen.id
    RETURNING j.queue
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM retried) AS q
)
SELECT (SELECT count(*) FROM candidates), (SELECT max(id) FROM candidates),
       (SELECT count(*) FROM retried)
FROM woken;

-- name: job_cancel
-- Admin: cancel a job that has not started.  NOWAIT: a pending-looking row that is locked is
-- running under a held lock, and waiting for it would block until the job ends.
UPDATE {jobs} SET status = 'cancelled', finished_at = now()
WHERE id = (SELECT id FROM {jobs}
            WHERE id = %(id)s AND status IN ('waiting', 'scheduled', 'pending')
            FOR UPDATE NOWAIT)
RETURNING id;

-- name: job_cancel_many
-- Admin: cancel the jobs matching the filters that have not started (waiting, scheduled or
-- pending); one batch.  Returns the jobs cancelled and the last id cancelled.
WITH candidates AS (
    SELECT id FROM {jobs}
    WHERE id > %(after_id)s
      AND status IN ('waiting', 'scheduled', 'pending')
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
    ORDER BY id
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE {jobs} AS j SET status = 'cancelled', finished_at = now()
    FROM candidates WHERE j.id = candidates.id
    RETURNING j.id
)
SELECT count(*), max(id) FROM cancelled;

-- name: job_request_cancel
-- Admin: ask the worker running a leased job to cancel it (it sees the flag on its next heartbeat).
UPDATE {jobs} SET cancel_requested = true
WHERE id = (SELECT id FROM {jobs} WHERE id = %(id)s AND status = 'running' FOR UPDATE NOWAIT)
RETURNING id;

-- name: job_held_request_cancel
-- Admin: ask the worker running a held-lock job to cancel it, on the job's start record, for
-- the version of its row this statement sees (the one before the running claim, which is not
-- committed).  The worker reads it at the job's start or within a poll interval; the NOTIFY
-- sent with it is quicker.  A record left from another version is taken over: its starts
-- were from that version, so they count no more.
INSERT INTO {held_starts} AS h (job_id, row_xmin, starts, cancel_requested_at)
SELECT id, xmin::text::bigint, 0, now() FROM {jobs}
WHERE id = %(id)s AND status IN ('pending', 'running')
ON CONFLICT (job_id) DO UPDATE
SET starts = CASE WHEN h.row_xmin = excluded.row_xmin THEN h.starts ELSE 0 END,
    row_xmin = excluded.row_xmin,
    cancel_requested_at = now()
RETURNING job_id;

-- name: job_held_request_cancel_many
-- Admin: ask the workers running the held-lock jobs that match the filters to cancel them (see
-- job_held_request_cancel): the jobs with a start recorded from the current version of their
-- row, which this statement sees as before the claim (pending).  That is a job running now,
-- or one whose worker died, whose next start reads the request.  Jobs already asked are not
-- counted again.
UPDATE {held_starts} AS h SET cancel_requested_at = now()
FROM {jobs} AS j
WHERE j.id = h.job_id AND j.xmin::text::bigint = h.row_xmin AND j.status = 'pending'
  AND h.starts > 0 AND h.cancel_requested_at IS NULL
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
  AND (%(task)s::text IS NULL OR j.task = %(task)s)
RETURNING h.job_id;

-- name: job_request_cancel_many
-- Admin: ask the workers running the leased jobs that match the filters to cancel them (each sees
-- the flag on its next heartbeat); jobs already asked are not counted again.  The running jobs
-- of one queue are few (what its workers hold), so one statement.
UPDATE {jobs} SET cancel_requested = true
WHERE status = 'running' AND NOT cancel_requested
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
RETURNING id;

-- name: job_list_attempts
-- Admin: the attempt_log of one job (migration 0018), from the jobs table or the archive; no
-- row: no such job.  The attempt running or done now is told by the job's own row.
(SELECT attempt_log FROM {jobs} WHERE id = %(id)s)
UNION ALL
(SELECT attempt_log FROM {archive} WHERE id = %(id)s)
LIMIT 1;

-- name: job_search
-- Admin: job_list with a payload filter (%(payload)s: JSON that the payload must contain, jsonb
-- @>), bounded: of the jobs matching queue, status and task below %(before)s, newest first,
-- only the first %(scan)s are read and tested against the payload (no index on payload, which
-- would slow every enqueue and claim), and at most %(limit)s of them returned.  Every row
-- ends with the smallest id read and how many were read; with no match, one row of NULLs
-- and those two.
WITH held_runs AS MATERIALIZED (
    -- The transactions running held-lock jobs, with their queues (see job_get in jobs.sql).
    SELECT h.queue, h.xmax FROM {held_runs} AS h WHERE {xact_running}(h.xmax)
), scanned AS MATERIALIZED (
    SELECT * FROM (
        SELECT id, queue, task, payload,
               CASE WHEN status = 'pending' AND EXISTS (
                        SELECT FROM held_runs AS h WHERE h.queue = j.queue AND h.xmax = j.xmax)
                    THEN 'running' ELSE status END AS status,
               priority, run_at, attempts, max_attempts,
               locked_by, locked_until, locked_at, entity_key, idempotency_key, created_at, meta,
               expires_at, last_error, finished_at, result
        FROM {jobs} AS j
        UNION ALL
        SELECT id, queue, task, payload, status, priority, run_at, attempts, max_attempts,
               locked_by, NULL::timestamptz, NULL::timestamptz, entity_key, idempotency_key,
               created_at, meta, expires_at, last_error, finished_at, result
        FROM {archive}
    ) AS listed
    WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(status)s::text IS NULL OR status = %(status)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(before)s::bigint IS NULL OR id < %(before)s)
    ORDER BY id DESC
    LIMIT %(scan)s
)
SELECT m.*, b.down_to, b.n
FROM (SELECT min(id) AS down_to, count(*) AS n FROM scanned) AS b
LEFT JOIN LATERAL (
    SELECT * FROM scanned WHERE payload @> %(payload)s::jsonb ORDER BY id DESC LIMIT %(limit)s
) AS m ON true
ORDER BY m.id DESC;

-- name: job_finished_per_minute
-- Dashboard charts: per queue and minute of the last %(minutes)s minutes, the jobs that
-- finished done and failed, and their wait (start of the last attempt minus its due time,
-- run_at): mean, 95th percentile and max seconds, by the minute they finished.  Two sources,
-- each job in exactly one: the finished jobs still in the table, read newest first from
-- jobs_finished_idx, at most %(scan)s of them, so the read is bounded at any throughput; and
-- the counts that the statements removing finished jobs wrote (finished_counts, migration
-- 0025: completion="delete" and "archive", pruning, the bulk delete).  The percentile is the
-- upper bound of the wait bucket (finished_wait_bucket) it falls in, capped at the minute's
-- max, for every job: the counts keep no single waits.  Every row carries how many rows were
-- read, the oldest finish time read (the minutes before it are incomplete when the bound was
-- reached) and the server's now; with nothing counted, one row of NULLs and those.  The index
-- holds every column read here, so the scan reads the index alone, once (docs/design.md,
-- "Dashboard charts: an index-only read, and the jobs that left the table").
WITH recent AS (
    SELECT queue, status = 'failed' AS failed, finished_at,
           greatest(extract(epoch FROM locked_at - run_at), 0)::float8 AS wait
    FROM {jobs}
    WHERE status IN ('done', 'failed')
      AND finished_at > now() - make_interval(mins => %(minutes)s)
    ORDER BY finished_at DESC
    LIMIT %(scan)s
), per_bucket AS (
    SELECT queue, minute, bucket, sum(done) AS done, sum(failed) AS failed,
           sum(wait_sum) AS wait_sum, max(wait_max) AS wait_max, min(oldest) AS oldest,
           sum(read) AS read, sum(n) AS n
    FROM (
        SELECT queue, date_trunc('minute', finished_at) AS minute,
               {finished_wait_bucket}(wait) AS bucket,
               count(*) FILTER (WHERE NOT failed) AS done, count(*) FILTER (WHERE failed) AS failed,
               sum(wait) AS wait_sum, max(wait) AS wait_max, min(finished_at) AS oldest,
               count(*) AS read, count(*) AS n
        FROM recent
        GROUP BY 1, 2, 3
        UNION ALL
        -- Each row of counts as its totals (bucket NULL, no jobs) and the jobs of its buckets.
        SELECT c.queue, c.minute, x.bucket, x.done, x.failed, x.wait_sum, x.wait_max, NULL,
               0, x.n
        FROM {finished_counts} AS c
        CROSS JOIN LATERAL (
            SELECT NULL::int AS bucket, c.done::bigint AS done, c.failed::bigint AS failed,
                   c.wait_sum, c.wait_max, 0::bigint AS n
            UNION ALL
            SELECT u.bucket, 0, 0, 0, NULL, u.n
            FROM unnest(c.buckets, c.counts) AS u(bucket, n)
        ) AS x
        WHERE c.minute > date_trunc('minute', now()) - make_interval(mins => %(minutes)s)
    ) AS both_sources
    GROUP BY 1, 2, 3
), ranked AS (
    SELECT *, sum(n) OVER (PARTITION BY queue, minute ORDER BY bucket) AS up_to,
           sum(n) OVER (PARTITION BY queue, minute) AS total
    FROM per_bucket
), per_minute AS (
    SELECT queue, minute, sum(done)::bigint AS done, sum(failed)::bigint AS failed,
           (sum(wait_sum) / sum(done + failed))::float8 AS wait_mean,
           least(min(0.001 * power(2::float8, bucket / 4::float8))
                     FILTER (WHERE bucket IS NOT NULL AND up_to >= 0.95 * total),
                 max(wait_max))::float8 AS wait_p95,
           max(wait_max)::float8 AS wait_max, min(oldest) AS oldest, sum(read) AS read
    FROM ranked
    GROUP BY 1, 2
)
SELECT p.queue, p.minute, p.done, p.failed, p.wait_mean, p.wait_p95, p.wait_max,
       coalesce(sum(p.read) OVER (), 0)::bigint AS scanned,
       min(p.oldest) OVER () AS oldest, now() AS now
FROM (VALUES (1)) AS one
LEFT JOIN per_minute AS p ON true
ORDER BY p.queue, p.minute;

-- name: job_delete_finished_many
-- Admin: delete the finished jobs (in %(statuses)s: done, failed, cancelled, nothing else)
-- matching the filters (with %(finished_within)s, those finished in the last that many
-- seconds; with %(older_than)s, those finished at least that many seconds ago); one batch.  Returns the jobs looked at, the last id looked at and the
-- jobs deleted.  A row another session locks is left alone (it is being retried), and so is a
-- failed or cancelled job that a waiting job depends on: a job no longer in the table counts
-- as done (dependencies.sql), and deleting it would let the waiting job run.  The jobs done or
-- failed within the charts' widest window (a day) are counted for the dashboard's charts in
-- the same statement (finished_counts_add, migration 0026; the last SELECT reads the count's
-- CTE so that it runs).
WITH candidates AS (
    SELECT id, status FROM {jobs}
    WHERE id > %(after_id)s
      AND status = ANY(%(statuses)s::text[])
      AND status IN ('done', 'failed', 'cancelled')
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(finished_within)s::float8 IS NULL
           OR finished_at > now() - make_interval(secs => %(finished_within)s))
      AND (%(older_than)s::float8 IS NULL
           OR finished_at <= now() - make_interval(secs => %(older_than)s))
    ORDER BY id
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM {jobs} AS j
    USING candidates AS c
    WHERE j.id = c.id
      AND (c.status = 'done' OR NOT EXISTS (
          SELECT 1 FROM {dependencies} AS d
          JOIN {jobs} AS w ON w.id = d.job_id AND w.status = 'waiting'
          WHERE d.depends_on = c.id))
    RETURNING j.id, j.queue, j.status, j.finished_at,
              greatest(extract(epoch FROM j.locked_at - j.run_at), 0)::float8 AS wait
), counted AS (
    SELECT {finished_counts_add}(array_agg(finished_at), array_agg(queue), array_agg(status),
                                 array_agg(wait)) AS counted_rows
    FROM deleted
)
SELECT (SELECT count(*) FROM candidates), (SELECT max(id) FROM candidates),
       (SELECT count(*) FROM deleted)
FROM counted;
