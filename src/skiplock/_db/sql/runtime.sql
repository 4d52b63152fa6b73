-- Statements of the worker runtime: queue settings, leadership, periodic ticks, pruning,
-- released and held-lock jobs, and status.  Placeholders as in jobs.sql.

-- name: session_watch_client
-- Make the server drop this session, rolling back its transaction, once its client has gone
-- silent (TCP keepalives and user timeout, the client's own values): by default PostgreSQL
-- waits on the kernel's, over two hours, holding the session's row locks meanwhile.
SELECT set_config('tcp_keepalives_idle', %(idle)s, false),
       set_config('tcp_keepalives_interval', %(interval)s, false),
       set_config('tcp_keepalives_count', %(count)s, false),
       set_config('tcp_user_timeout', %(user_timeout)s, false);

-- name: session_use_utc
-- Have this session send timestamps in UTC, which psycopg makes datetimes without converting
-- each through zoneinfo (docs/design.md, "Sessions in UTC").
SELECT set_config('TimeZone', 'UTC', false);

-- name: session_read_lag
-- How stale this session's reads are: whether its server is a standby, and if so the seconds
-- its replay is behind (0 when it has replayed all the WAL it received, else the time since
-- the last transaction it replayed committed on the primary; NULL when it replayed none since
-- it started), when that transaction committed, and whether a WAL receiver runs (its pid is
-- shown to every role; its details only to pg_read_all_stats).
SELECT pg_is_in_recovery() AS standby,
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0.0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())
       END::float8 AS lag_seconds,
       pg_last_xact_replay_timestamp() AS replayed_commit,
       coalesce((SELECT pid IS NOT NULL FROM pg_stat_wal_receiver), false) AS receiving;

-- name: queue_settings
-- Pause flags, concurrency limits and whether a rate limit applies, of the given queues
-- (queues without a row have none of them).
SELECT name, paused, concurrency_limit, rate_limit IS NOT NULL
FROM {queues} WHERE name = ANY(%(names)s::text[]);

-- name: queue_settings_shown
-- One queue's settings as an admin page shows them (no row: it has none).
SELECT paused, concurrency_limit, rate_limit, rate_period, aging_step
FROM {queues} WHERE name = %(name)s;

-- name: queue_set_paused
-- Pause or resume a queue.
INSERT INTO {queues} AS q (name, paused) VALUES (%(name)s, %(paused)s)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = now()
RETURNING name;

-- name: queue_set_concurrency_limit
-- Cap (or, with NULL, uncap) the running jobs of a queue across all workers.
INSERT INTO {queues} AS q (name, concurrency_limit) VALUES (%(name)s, %(limit)s)
ON CONFLICT (name) DO UPDATE SET concurrency_limit = excluded.concurrency_limit, updated_at = now()
RETURNING name;

-- name: queue_set_rate_limit
-- Allow (or, with NULL, stop limiting) at most %(limit)s job starts of a queue per
-- %(period)s seconds across all workers; the bucket starts full.
INSERT INTO {queues} AS q (name, rate_limit, rate_period)
VALUES (%(name)s, %(limit)s, CASE WHEN %(limit)s::int IS NOT NULL THEN %(period)s::float8 END)
ON CONFLICT (name) DO UPDATE
SET rate_limit = excluded.rate_limit, rate_period = excluded.rate_period, rate_tokens = NULL,
    rate_refilled_at = NULL, updated_at = now()
RETURNING name;

-- name: queue_set_aging
-- Age a queue's pending jobs by one priority level per %(step)s seconds they have been due
-- (NULL: no aging, priority is strict); applied by the maintenance leader (job_age_pending).
INSERT INTO {queues} AS q (name, aging_step) VALUES (%(name)s, %(step)s::float8)
ON CONFLICT (name) DO UPDATE SET aging_step = excluded.aging_step, updated_at = now()
RETURNING name;

-- name: queue_rate_budget
-- How many jobs of a rate-limited queue may start now: its bucket (at most rate_limit starts)
-- as last left, refilled at rate_limit per rate_period seconds since.  No row: no rate limit.
-- Read and spent (queue_spend_rate_budget) under queue_lock_for_claim, in one transaction.
SELECT least(rate_limit::float8,
             coalesce(rate_tokens, rate_limit::float8)
             + rate_limit * extract(epoch FROM now() - coalesce(rate_refilled_at, now()))::float8
               / rate_period)
FROM {queues} WHERE name = %(queue)s AND rate_limit IS NOT NULL;

-- name: queue_spend_rate_budget
-- What is left of a rate-limited queue's bucket after a claim, as of now.
UPDATE {queues} SET rate_tokens = %(left)s, rate_refilled_at = now() WHERE name = %(queue)s;

-- name: queue_lock_for_claim
-- Serialise claims of one limited queue until the transaction ends, so limits hold exactly: a
-- lock on the queue's row of the queues table, which only roles that may write queue settings
-- can take (an advisory lock, which any login can take, let a stranger stop the queue's claims
-- and the worker's with them).  It waits at most %(lock_timeout)s (a setting local to the
-- transaction) for a session holding the row: then the claim of this queue fails with
-- lock_not_available and the worker claims from its other queues.  No row (the queue's
-- settings were deleted meanwhile): no limit to keep.
WITH wait AS MATERIALIZED (
    SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS setting
)
SELECT q.name FROM wait, {queues} AS q WHERE q.name = %(queue)s FOR NO KEY UPDATE OF q;

-- name: queue_running_count
-- Running jobs of one queue, across all workers: leased ones by their status, held-lock ones
-- by the rows of held_runs their transactions lock (job_claim: every other session sees a
-- running held-lock job's row as pending; a row lock only a worker may take, so no other
-- login can fake a running job, nor keep one from being counted: migration 0024), or by the
-- shared queue markers their transactions hold, counted only for sessions that may write the
-- jobs table, whichever is more.  Behind a transaction-mode pooler a claim's server session
-- may have no committed row of its own yet (it then inserts one, seen by others only at its
-- commit), and its marker counts it; a stranger's exclusive lock on the marker, which keeps
-- markers from being taken, leaves the rows to count.  Neither a stranger nor a producer can
-- raise either count.
SELECT (SELECT count(*) FROM {jobs} WHERE status = 'running' AND queue = %(queue)s)
     + greatest(
           (SELECT count(*) FROM {held_runs} AS h
            WHERE h.queue = %(queue)s AND {xact_running}(h.xmax)),
           (SELECT count(*)
            FROM pg_locks AS l
            JOIN pg_stat_activity AS a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
              AND l.mode = 'ShareLock'
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.classid = hashtext('skiplock_held_job')::oid
              AND l.objid = hashtext(%(schema)s || '/' || %(queue)s)::oid
              AND {may_write_jobs}(a.usesysid)));

-- name: session_register_held_runs
-- Give this session a row of held_runs for each of %(queues)s, committed before it claims a
-- held-lock job of them, so that its claims' locks on the rows are counted (see job_claim).
-- And forget at most %(prune)s rows of sessions that are gone, as session_prune_held_runs does,
-- so that held-lock workers that die and start again pile none up where no maintenance leader
-- runs: each session adds a row per queue and removes many more.  Rows another session is
-- removing are skipped, never waited for (no live session locks a row of a gone one).
WITH gone AS (
    DELETE FROM {held_runs} AS h
    WHERE (h.queue, h.pid) IN (
        SELECT s.queue, s.pid FROM {held_runs} AS s
        WHERE NOT EXISTS (SELECT FROM pg_stat_activity AS a WHERE a.pid = s.pid)
        LIMIT %(prune)s
        FOR UPDATE SKIP LOCKED)
)
INSERT INTO {held_runs} (queue, pid)
SELECT q, pg_backend_pid() FROM unnest(%(queues)s::text[]) AS q
ON CONFLICT DO NOTHING;

-- name: session_prune_held_runs
-- Forget the rows of held_runs of sessions that are gone (a row of a live session is kept:
-- it may be locked, and its session claims again).  Run by the maintenance leader.
DELETE FROM {held_runs} AS h
WHERE NOT EXISTS (SELECT FROM pg_stat_activity AS a WHERE a.pid = h.pid)
RETURNING h.pid;

-- name: session_list_lock_strangers
-- Sessions that hold (or wait for) one of skiplock's advisory keys of this schema (held-lock
-- markers, which workers of the last version count) without being allowed to write the jobs
-- table: not workers (see doctor_lock_holders).  Held-lock jobs and their entity keys are
-- marked by row locks no such session may take (migrations 0020 and 0024).  A job marker's
-- first key names the schema; a queue marker's first key is the same for every schema, and its
-- second is the hash of schema and queue: it is of this schema when it is the hash of one of
-- its queues with settings (a limited queue's count, of the last version, reads it), of
-- held-lock sessions (held_runs), or of %(queues)s (the worker's).  Two skiplock schemas of
-- one database do not list each other's workers.
SELECT l.pid, a.usename::text,
       CASE l.classid WHEN hashtext('skiplock_held_job')::oid THEN 'a held-lock queue marker'
                      ELSE 'a held-lock job marker' END AS what,
       l.mode, l.granted
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (l.classid = hashtext('skiplock_held_job_id/' || %(schema)s)::oid
       OR l.classid = hashtext('skiplock_held_job')::oid
          AND l.objid IN (SELECT hashtext(%(schema)s || '/' || q.name)::oid FROM {queues} AS q
                          UNION ALL
                          SELECT hashtext(%(schema)s || '/' || h.queue)::oid FROM {held_runs} AS h
                          UNION ALL
                          SELECT hashtext(%(schema)s || '/' || w.name)::oid
                          FROM unnest(%(queues)s::text[]) AS w(name)))
  AND NOT {may_write_jobs}(a.usesysid)
ORDER BY 1, 3, 4;

-- name: leader_acquire
-- Take or renew a maintenance role; returns the holder, which is us only if we have it.  Waits
-- at most 2 s for a session holding the role's row (lock_timeout, local to the statement's
-- transaction, as in every maintenance statement that may wait on a row another session can
-- lock: it then fails and is run again next round).
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
INSERT INTO {leaders} AS l (role, holder, expires_at)
SELECT %(role)s, %(holder)s, now() + make_interval(secs => %(ttl)s) FROM wait
ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
    WHERE l.holder = excluded.holder OR l.expires_at < now()
RETURNING holder;

-- name: leader_resign
-- Give a role up at shutdown so another worker takes it at once.
DELETE FROM {leaders} WHERE role = %(role)s AND holder = %(holder)s;

-- name: presence_report
-- A running worker says it is alive, with what it runs now and has finished since it started
-- (waiting at most 2 s on a lock, as leader_acquire).
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
INSERT INTO {workers} AS w (id, host, pid, queues, concurrency, model, version, running, finished)
SELECT %(id)s, %(host)s, %(pid)s, %(queues)s::text[], %(concurrency)s, %(model)s, %(version)s,
       %(running)s, %(finished)s
FROM wait
ON CONFLICT (id) DO UPDATE
SET seen_at = now(), running = excluded.running, finished = excluded.finished;

-- name: presence_forget
-- A worker that stops removes its row.
DELETE FROM {workers} WHERE id = %(id)s;

-- name: presence_prune_gone
-- Forget workers not seen for %(older_than)s seconds (killed without removing their row);
-- waits at most 2 s on a lock, as leader_acquire.
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
DELETE FROM {workers} AS w USING wait
WHERE w.seen_at < now() - make_interval(secs => %(older_than)s) RETURNING w.id;

-- name: presence_list
-- Every worker with a row, oldest first, how many seconds ago each last reported and how long
-- it has run (both by the server's clock, whatever the caller's).
SELECT id, host, pid, queues, concurrency, model, version, started_at, seen_at, running, finished,
       extract(epoch FROM now() - seen_at)::float8 AS seen_ago,
       extract(epoch FROM now() - started_at)::float8 AS up_seconds
FROM {workers} ORDER BY started_at, id;

-- name: periodic_claim_tick
-- Record a periodic tick unless some worker already did: the row is the right to enqueue it.
-- A tick before the task's latest recorded one was handled too (workers enqueue ticks oldest
-- first), though its row may have been pruned: a catch-up asks for ticks over a day old.
-- Waits at most 2 s on a lock (another transaction recording the same tick), as leader_acquire.
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
INSERT INTO {ticks} (name, tick, schedule)
SELECT %(name)s, %(tick)s, %(schedule)s FROM wait
WHERE NOT EXISTS (SELECT 1 FROM {ticks} WHERE name = %(name)s AND tick > %(tick)s)
ON CONFLICT DO NOTHING
RETURNING name;

-- name: periodic_reconcile
-- Drop the ticks recorded before %(since)s (when this worker started, by the server's clock)
-- of schedules the app does not define (%(names)s) though it has their task (%(tasks)s: apps
-- sharing a schema may define different periodic tasks), or defines otherwise (%(schedules)s,
-- each name's definition; a tick recorded without one stands for any), and cancel their jobs not
-- started yet (a running or locked job is left to finish); returns, per schedule, whether it
-- changed (else it is gone), how many ticks were dropped and the ids of the cancelled jobs.
-- Later ticks are left alone: another worker, of another version, still enqueues them.  Waits
-- at most 2 s on a lock, as leader_acquire.
WITH wait AS MATERIALIZED (
    SELECT set_config('lock_timeout', '2s', true) AS setting
), defined AS (
    SELECT * FROM unnest(%(names)s::text[], %(schedules)s::text[]) AS d(name, schedule)
), dropped AS (
    DELETE FROM {ticks} AS t USING wait
    WHERE t.tick < %(since)s
      AND NOT EXISTS (SELECT 1 FROM defined AS d
                      WHERE d.name = t.name AND (t.schedule IS NULL OR t.schedule = d.schedule))
      AND (EXISTS (SELECT 1 FROM defined AS d WHERE d.name = t.name)
           OR t.schedule IS NOT NULL AND t.schedule::jsonb ->> 'task' = ANY (%(tasks)s::text[]))
    RETURNING t.name, t.job_id, EXISTS (SELECT 1 FROM defined AS d WHERE d.name = t.name)
                                AS changed
), cancelled AS (
    UPDATE {jobs} AS j
    SET status = 'cancelled', finished_at = now(),
        last_error = format('periodic schedule %%s: %%s', d.name,
                            CASE WHEN d.changed THEN 'its definition changed'
                                 ELSE 'no longer defined by the app' END)
    FROM dropped AS d
    WHERE j.id = d.job_id
      AND j.id IN (SELECT id FROM {jobs}
                   WHERE id IN (SELECT job_id FROM dropped)
                     AND status IN ('waiting', 'scheduled', 'pending')
                   FOR UPDATE SKIP LOCKED)
    RETURNING j.id
)
SELECT d.name, d.changed, count(*)::int,
       coalesce(array_agg(d.job_id ORDER BY d.job_id)
                    FILTER (WHERE d.job_id IN (SELECT id FROM cancelled)), ARRAY[]::bigint[])
FROM dropped AS d
GROUP BY d.name, d.changed
ORDER BY d.name;

-- name: periodic_record_tick_job
-- Note which job a tick enqueued.
UPDATE {ticks} SET job_id = %(enqueued_id)s WHERE name = %(name)s AND tick = %(tick)s;

-- name: clock_read
-- The server's clock, by which periodic ticks fall (not a worker's own).
SELECT clock_timestamp();

-- name: periodic_prune_ticks
-- Forget ticks older than a day but each task's latest, which guards the older ones against a
-- second run (periodic_claim_tick).  Waits at most 2 s on a lock, as leader_acquire.
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
DELETE FROM {ticks} AS t USING wait
WHERE t.tick < now() - interval '1 day'
  AND EXISTS (SELECT 1 FROM {ticks} AS later WHERE later.name = t.name AND later.tick > t.tick);

-- name: job_prune_finished
-- Delete up to %(limit)s jobs finished (in one status) before the retention.  Those done or
-- failed within the charts' widest window (a retention under a day) are counted for the
-- dashboard's charts in the same statement (finished_counts_add, migration 0026; the last
-- SELECT reads the count's CTE so that it runs).
WITH gone AS (
    DELETE FROM {jobs} WHERE id IN (
        SELECT id FROM {jobs}
        WHERE status = %(status)s AND finished_at < now() - make_interval(secs => %(older_than)s)
        ORDER BY finished_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id, queue, status, finished_at,
              greatest(extract(epoch FROM locked_at - run_at), 0)::float8 AS wait
), counted AS (
    SELECT {finished_counts_add}(array_agg(finished_at), array_agg(queue), array_agg(status),
                                 array_agg(wait)) AS counted_rows
    FROM gone
)
SELECT id FROM gone CROSS JOIN counted;

-- name: job_finished_counts_merge
-- Merge the charts' counts of each queue and past minute (before the last one) that has more
-- than one row into one row, so the charts' read sums one row per queue and minute once it
-- is past, not one per outcome batch.  One statement: the rows it deletes are exactly those
-- its insert adds up (a row inserted meanwhile stays, for the next merge).  How many rows it
-- merged.  Run by the maintenance leader.
WITH old AS (
    DELETE FROM {finished_counts} AS f
    WHERE f.minute < date_trunc('minute', now()) - interval '1 minute'
      AND (f.minute, f.queue) IN (
          SELECT minute, queue FROM {finished_counts}
          WHERE minute < date_trunc('minute', now()) - interval '1 minute'
          GROUP BY 1, 2
          HAVING count(*) > 1)
    RETURNING f.*
), per_bucket AS (
    SELECT o.minute, o.queue, u.bucket, sum(u.n) AS n
    FROM old AS o
    CROSS JOIN LATERAL unnest(o.buckets, o.counts) AS u(bucket, n)
    GROUP BY 1, 2, 3
), merged AS (
    INSERT INTO {finished_counts} (minute, queue, done, failed, wait_sum, wait_max, buckets,
                                   counts)
    SELECT t.minute, t.queue, t.done, t.failed, t.wait_sum, t.wait_max, b.buckets, b.counts
    FROM (SELECT minute, queue, sum(done) AS done, sum(failed) AS failed,
                 sum(wait_sum) AS wait_sum, max(wait_max) AS wait_max
          FROM old GROUP BY 1, 2) AS t
    JOIN (SELECT minute, queue, array_agg(bucket ORDER BY bucket) AS buckets,
                 array_agg(n ORDER BY bucket) AS counts
          FROM per_bucket GROUP BY 1, 2) AS b USING (minute, queue)
)
SELECT count(*) FROM old;

-- name: job_finished_counts_prune
-- Forget the charts' counts older than their widest window (a day); how many.  Run by the
-- maintenance leader.
WITH forgotten AS (
    DELETE FROM {finished_counts} WHERE minute < now() - interval '1 day' RETURNING 1
)
SELECT count(*) FROM forgotten;

-- name: job_release_many
-- Give back claimed jobs that never started (graceful shutdown): pending again, attempt unspent.
UPDATE {jobs} AS j
SET status = 'pending', attempts = j.attempts - 1, locked_until = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[])
     AS c(id, attempts, claim_time)
WHERE j.id = c.id
  AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false)
RETURNING j.id;

-- name: job_table_pages
-- The size of the jobs table in pages (what queue_status samples its finished jobs from).
SELECT pg_relation_size(c.oid) / current_setting('block_size')::int
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = 'jobs';

-- name: queue_status
-- Per queue: pending (due), scheduled, waiting (for other jobs), running, failed, done
-- (estimated from a sample on a large table: finished_estimated), age of the oldest due job
-- in seconds, jobs finished in the last minute, its settings (paused,
-- concurrency limit, rate limit) and the live workers that claim from it (reported within
-- %(silent)s seconds); a queue with settings or workers but no jobs is listed with zero counts.
-- Running held-lock jobs, whose rows look pending, are counted running by the rows of held_runs
-- their transactions lock, and kept out of the oldest due job's age by their rows' xmax (see
-- job_get): while any run, the due jobs are read a second time for it (in the claim index),
-- each checked against the few running ones (docs/design.md, "The oldest due age read twice
-- beside running held-lock jobs").
WITH held_runs AS MATERIALIZED (
    -- The transactions running held-lock jobs, with their queues (row locks only a worker
    -- may take: migration 0024).
    SELECT h.queue, h.xmax FROM {held_runs} AS h WHERE {xact_running}(h.xmax)
), held AS (
    SELECT queue, count(*) AS running FROM held_runs GROUP BY queue
), counts AS (
    -- Live jobs counted exactly, each status in its partial index (jobs_claim_idx,
    -- jobs_scheduled_idx, jobs_waiting_idx, jobs_running_idx): as many rows as are live,
    -- however many finished ones the table holds.
    SELECT queue,
           (sum(n) FILTER (WHERE status = 'pending'))::bigint AS pending,
           (sum(n) FILTER (WHERE status = 'scheduled'))::bigint AS scheduled,
           (sum(n) FILTER (WHERE status = 'waiting'))::bigint AS waiting,
           (sum(n) FILTER (WHERE status = 'running'))::bigint AS running,
           (sum(n) FILTER (WHERE status = 'failed'))::bigint AS failed,
           (sum(n) FILTER (WHERE status = 'done'))::bigint AS done,
           (sum(n) FILTER (WHERE status = 'cancelled'))::bigint AS cancelled,
           min(oldest) AS oldest_pending,
           (sum(n) FILTER (WHERE status = 'recent'))::bigint AS finished_last_minute
    FROM (
        SELECT queue, 'pending' AS status, count(*) AS n, min(run_at) AS oldest
        FROM {jobs} WHERE status = 'pending' GROUP BY queue
        UNION ALL
        SELECT queue, 'scheduled', count(*), NULL FROM {jobs} WHERE status = 'scheduled'
        GROUP BY queue
        UNION ALL
        SELECT queue, 'waiting', count(*), NULL FROM {jobs} WHERE status = 'waiting'
        GROUP BY queue
        UNION ALL
        SELECT queue, 'running', count(*), NULL FROM {jobs} WHERE status = 'running'
        GROUP BY queue
        UNION ALL
        -- Finished jobs: those in 8 ranges of pages spread evenly over the table (TID range
        -- scans, a read of the same pages however large the table; the whole of a small
        -- table, so exact), scaled up by %(scale)s, the pages of the table over those read: a
        -- refresh costs the same at ten thousand finished jobs as at ten million
        -- (docs/design.md, "Status counts that do not read the whole table").
        SELECT queue, status, round(count(*) * %(scale)s::float8)::bigint, NULL
        FROM (
            SELECT queue, status FROM {jobs}
            WHERE ctid >= %(from_0)s::tid AND ctid < %(to_0)s::tid
            UNION ALL
            SELECT queue, status FROM {jobs}
            WHERE ctid >= %(from_1)s::tid AND ctid < %(to_1)s::tid
            UNION ALL
            SELECT queue, status FROM {jobs}
            WHERE ctid >= %(from_2)s::tid AND ctid < %(to_2)s::tid
            UNION ALL
            SELECT queue, status FROM {jobs}
            WHERE ctid >= %(from_3)s::tid AND ctid < %(to_3)s::tid
            UNION ALL
            SELECT queue, status FROM {jobs}
            WHERE ctid >= %(from_4)s::tid AND ctid < %(to_4)s::tid
            UNION ALL
            SELECT queue, status FROM {jobs}
            WHERE ctid >= %(from_5)s::tid AND ctid < %(to_5)s::tid
            UNION ALL
            SELECT queue, status FROM {jobs}
            WHERE ctid >= %(from_6)s::tid AND ctid < %(to_6)s::tid
            UNION ALL
            SELECT queue, status FROM {jobs}
            WHERE ctid >= %(from_7)s::tid AND ctid < %(to_7)s::tid
        ) AS sample
        WHERE status IN ('done', 'failed', 'cancelled')
        GROUP BY queue, status
        UNION ALL
        -- Finished in the last minute, exactly: a range of jobs_finished_idx.
        SELECT queue, 'recent', count(*), NULL
        FROM {jobs}
        WHERE status IN ('done', 'failed') AND finished_at > now() - interval '1 minute'
        GROUP BY queue
    ) AS c
    GROUP BY queue
), oldest_not_held AS (
    SELECT queue, min(run_at) AS oldest_pending
    FROM {jobs} AS j
    WHERE status = 'pending' AND EXISTS (SELECT FROM held_runs)
      AND NOT EXISTS (SELECT FROM held_runs AS h WHERE h.queue = j.queue AND h.xmax = j.xmax)
    GROUP BY queue
), served AS (
    SELECT served.queue, count(*) AS workers
    FROM {workers} AS w, unnest(w.queues) AS served(queue)
    WHERE w.seen_at > now() - make_interval(secs => %(silent)s)
    GROUP BY served.queue
)
SELECT coalesce(c.queue, q.name, s.queue) AS queue,
       greatest(coalesce(c.pending, 0) - coalesce(h.running, 0), 0) AS pending,
       coalesce(c.scheduled, 0) AS scheduled, coalesce(c.waiting, 0) AS waiting,
       coalesce(c.running, 0) + least(coalesce(h.running, 0), coalesce(c.pending, 0)) AS running,
       coalesce(c.failed, 0) AS failed,
       coalesce(c.done, 0) AS done, coalesce(c.cancelled, 0) AS cancelled,
       extract(epoch FROM now() - CASE WHEN NOT EXISTS (SELECT FROM held_runs)
                                       THEN c.oldest_pending ELSE o.oldest_pending END)::float8
           AS oldest_pending_seconds,
       coalesce(c.finished_last_minute, 0) AS finished_last_minute,
       %(scale)s::float8 > 1 AS finished_estimated,
       coalesce(q.paused, false) AS paused, q.concurrency_limit, q.rate_limit, q.rate_period,
       coalesce(s.workers, 0) AS workers
FROM counts AS c
FULL JOIN {queues} AS q ON q.name = c.queue
FULL JOIN served AS s ON s.queue = coalesce(c.queue, q.name)
LEFT JOIN held AS h ON h.queue = c.queue
LEFT JOIN oldest_not_held AS o ON o.queue = c.queue
ORDER BY 1;

-- name: job_spend_rolled_back_attempt
-- A held-lock job whose transaction rolled back (its outcome could not be written) gets the
-- attempt counted anyway, with the error, and waits out a backoff: no hot loop of re-runs.
-- The rollback took the claim's count back, and with it the count of any dead starts before
-- the claim (job_count_dead_attempts): the row is back below the claim's attempt number, which
-- it takes again here, as long as no other claim has written the row since.
UPDATE {jobs}
SET attempts = %(attempts)s,
    last_error = %(error)s,
    attempt_log = {attempt_log_append}(attempt_log, jsonb_build_object(
        'attempt', %(attempts)s::int, 'worker', NULL, 'started_at', NULL, 'ended_at', now(),
        'error', left(%(error)s, 2000),
        'outcome', CASE WHEN %(attempts)s >= max_attempts THEN 'failed' ELSE 'retried' END)),
    status = CASE WHEN %(attempts)s >= max_attempts THEN 'failed' ELSE 'scheduled' END,
    finished_at = CASE WHEN %(attempts)s >= max_attempts THEN now() END,
    run_at = CASE WHEN %(attempts)s >= max_attempts THEN run_at
                  ELSE now() + make_interval(secs => %(retry_in)s) END
WHERE id = (SELECT id FROM {jobs}
            WHERE id = %(id)s AND status = 'pending' AND attempts < %(attempts)s
            FOR UPDATE SKIP LOCKED)
RETURNING id, status;

-- name: job_held_start_count
-- Record a start of a held-lock job, committed at once (apart from the job's transaction, on
-- another connection) and without waiting for the WAL flush; returns how many times the job
-- was started from the same version of its row, and whether an admin asked to cancel the job
-- in that version (job_held_request_cancel).  This statement's snapshot sees the row as it
-- was before the claim (the claim is not committed), so after a start whose worker died, the
-- next start finds the same version (row_xmin): its count goes up.  Any outcome, snooze or
-- release writes the row, and the next start counts from 1 again, with no request.
WITH seen AS (
    SELECT xmin::text::bigint AS row_xmin FROM {jobs} WHERE id = %(id)s
), commit_mode AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
INSERT INTO {held_starts} AS h (job_id, row_xmin, starts)
SELECT %(id)s, seen.row_xmin, 1 FROM seen, commit_mode
ON CONFLICT (job_id) DO UPDATE
SET starts = CASE WHEN h.row_xmin = excluded.row_xmin THEN h.starts + 1 ELSE 1 END,
    cancel_requested_at = CASE WHEN h.row_xmin = excluded.row_xmin
                               THEN h.cancel_requested_at END,
    row_xmin = excluded.row_xmin,
    last_at = now()
RETURNING starts, cancel_requested_at IS NOT NULL AS cancel_requested;

-- name: job_held_cancel_requests
-- Which of these running held-lock jobs an admin asked to cancel (job_held_request_cancel):
-- the fallback to the NOTIFY, read once per poll interval.  A request from an earlier version
-- of a job's row was cleared by the start of the running claim (job_held_start_count).
SELECT job_id FROM {held_starts}
WHERE job_id = ANY(%(ids)s::bigint[]) AND cancel_requested_at IS NOT NULL;

-- name: job_count_dead_attempts
-- In a held-lock claim's transaction: the claimed job's earlier starts died with their worker
-- (job_held_start_count), so they were attempts: count them and say so.  The claim is the
-- ownership token; the caller holds the row lock.
UPDATE {jobs}
SET attempts = %(counted)s, last_error = %(error)s,
    attempt_log = {attempt_log_append}(attempt_log, jsonb_build_object(
        'attempt', %(counted)s::int - 1, 'worker', NULL, 'started_at', NULL, 'ended_at', now(),
        'outcome', 'lost', 'error', left(%(error)s, 2000)))
WHERE id = %(id)s AND status = 'running' AND locked_by = %(worker)s AND attempts = %(attempts)s
  AND locked_at = %(claimed_at)s
RETURNING id;

-- name: job_held_starts_prune
-- Forget the starts whose job's row has moved on to another version (an outcome was written,
-- or the job is gone): only a start from a version still current can be followed by another
-- from the same one.  A running held-lock job's row is seen as it was before its claim.  Waits
-- at most 2 s on a lock, as leader_acquire.
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
DELETE FROM {held_starts} AS h USING wait
WHERE NOT EXISTS (
    SELECT 1 FROM {jobs} AS j WHERE j.id = h.job_id AND j.xmin::text::bigint = h.row_xmin
)
RETURNING h.job_id;

-- name: job_held_start_forget
-- A held-lock job was stopped by its worker (shutdown) and rolled back on purpose: its start
-- must not count as one whose worker died.  A cancel request on the record stays, for the
-- job's next start.
WITH kept AS (
    UPDATE {held_starts} SET starts = greatest(starts - 1, 0)
    WHERE job_id = %(id)s AND cancel_requested_at IS NOT NULL
    RETURNING job_id
)
DELETE FROM {held_starts} WHERE job_id = %(id)s AND cancel_requested_at IS NULL;

-- name: limits_set_for_key
-- Set the limits of one key's value (NULL: none of that kind); with neither left, the key has
-- no limits (its row goes).  The rate bucket starts full.  A concurrency limit of N gets the
-- key N slots in held_key_runs, if it has fewer: a held-lock job of the key locks one while it
-- runs (migration 0028).  Slots are never deleted here: one may be locked by a running job.
-- At most 10000 slots: each held-lock job holds a connection of its own, so a key never has
-- more running held (a larger limit, "no real limit", wrote a row per unit: hours for 2^31).
WITH gone AS (
    DELETE FROM {key_limits}
    WHERE key = %(key)s AND %(concurrency)s::int IS NULL AND %(rate)s::int IS NULL
    RETURNING key
), slots AS (
    INSERT INTO {held_key_runs} (key, slot)
    SELECT %(key)s, s
    FROM generate_series(0, least(coalesce(%(concurrency)s::int, 0), 10000) - 1) AS s
    ON CONFLICT DO NOTHING
    RETURNING slot
)
INSERT INTO {key_limits} AS k (key, concurrency_limit, rate_limit, rate_period)
SELECT %(key)s, %(concurrency)s::int, %(rate)s::int,
       CASE WHEN %(rate)s::int IS NOT NULL THEN %(period)s::float8 END
WHERE %(concurrency)s::int IS NOT NULL OR %(rate)s::int IS NOT NULL
ON CONFLICT (key) DO UPDATE
SET concurrency_limit = excluded.concurrency_limit, rate_limit = excluded.rate_limit,
    rate_period = excluded.rate_period, rate_tokens = NULL, rate_refilled_at = NULL,
    updated_at = now()
RETURNING key;

-- name: limits_of_keys
-- Every key with limits: (key, concurrency limit, rate limit, rate period), by key.
SELECT key, concurrency_limit, rate_limit, rate_period FROM {key_limits} ORDER BY key;

-- name: limits_on_any_key
-- Whether any key has limits: a worker claims through job_claim_key_limited only then.
SELECT EXISTS (SELECT FROM {key_limits});

-- name: limits_key_rooms
-- For each of %(keys)s (locked by limits_lock_keys_for_claim in this transaction, with their
-- concurrency limits and rate budgets), how many of its jobs may start now: its concurrency
-- limit less its running jobs, leased ones by their status and held-lock ones by the slots
-- their transactions lock (held_key_runs, migration 0028), counted in this statement's
-- snapshot, which sees every claim of these keys that committed before the locks; and its
-- rate budget.  NULL: no limit of that kind.  In the order of %(keys)s.  A slot never locked
-- has no xmax: only the slots ever used (claims take the first free one, so about the key's
-- peak of held-lock jobs) are probed, not one per unit of its limit.
SELECT k.key,
       least(k.concurrency
             - (SELECT count(*)::int FROM {jobs} AS r
                WHERE r.status = 'running' AND r.limit_key = k.key)
             - (SELECT count(*)::int FROM {held_key_runs} AS h
                WHERE h.key = k.key AND h.xmax <> '0'::xid AND {xact_running}(h.xmax)),
             floor(k.budget)::int) AS room
FROM unnest(%(keys)s::text[], %(concurrency)s::int[], %(budget)s::float8[])
     WITH ORDINALITY AS k(key, concurrency, budget, place)
ORDER BY k.place;

-- name: limits_spend_key_budget
-- What is left of a rate-limited key's bucket after a held-lock claim, as of now (under the
-- key's lock, taken by limits_lock_keys_for_claim in this transaction).
UPDATE {key_limits} SET rate_tokens = %(left)s, rate_refilled_at = now() WHERE key = %(key)s;
