-- Jobs that run after others (enqueue with depends_on; migration 0010).  Placeholders as in
-- jobs.sql, {dependencies} is the job_dependencies table.
--
-- The state of a job depended on is its row's status, else its archived row's (completion
-- 'archive'), else 'done': a job no longer in either table finished and was deleted
-- (completion 'delete') or pruned.

-- name: job_insert_dependent
-- Insert jobs that share every column but the payload and depend on the jobs %(depends_on)s:
-- 'waiting' unless every one of those is done already; with an idempotency key, skipped when an
-- unfinished job holds it.  Returns their ids in input order (NULL when skipped) and the ids
-- depended on that no job ever had (above the last id given out): then nothing is inserted.
-- One NOTIFY for the queue if any is due and a worker of it is idle (see channel_idle_hold);
-- delivered when the caller's transaction commits.
WITH needed AS (
    SELECT d.id, coalesce(j.status, a.status, 'done') AS status,
           (j.id IS NOT NULL OR a.id IS NOT NULL
            OR d.id <= (SELECT last_value FROM {jobs_id_seq})) AS known
    FROM unnest(%(depends_on)s::bigint[]) AS d(id)
    LEFT JOIN {jobs} AS j ON j.id = d.id
    LEFT JOIN {archive} AS a ON a.id = d.id
), input AS (
    SELECT coalesce(%(run_at)s::timestamptz,
                    now() + make_interval(secs => coalesce(%(delay)s::float8, 0))) AS due,
           coalesce(bool_and(needed.status = 'done'), true) AS ready,
           coalesce(bool_and(needed.known), true) AS known
    FROM needed
), inserted AS (
    INSERT INTO {jobs} (queue, task, payload, priority, run_at, max_attempts, entity_key,
                        idempotency_key, meta, expires_at, fair_key, limit_key, status)
    SELECT %(queue)s::text, %(task)s::text, p.payload, %(priority)s::int, input.due,
           %(max_attempts)s::int, %(entity_key)s::text, %(idempotency_key)s::text,
           %(meta)s::jsonb,
           coalesce(%(expires_at)s::timestamptz,
                    now() + make_interval(secs => %(expires_in)s::float8)),
           %(fair_key)s::text,  -- no turn taken: released later, at its run_at
           %(limit_key)s::text,
           CASE WHEN NOT input.ready THEN 'waiting'
                WHEN input.due > now() THEN 'scheduled' ELSE 'pending' END
    FROM input, jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS p(payload, ord)
    WHERE input.known
    ORDER BY p.ord
    ON CONFLICT (idempotency_key)
        WHERE idempotency_key IS NOT NULL AND status IN ('waiting', 'scheduled', 'pending', 'running')
        DO NOTHING
    RETURNING id, status
), linked AS (
    INSERT INTO {dependencies} (job_id, depends_on)
    SELECT inserted.id, needed.id
    FROM inserted, (SELECT DISTINCT id FROM needed) AS needed
    WHERE inserted.status = 'waiting'
), woken AS (
    SELECT count(pg_notify(%(channel)s, %(queue)s::text)) AS n
    FROM (SELECT 1 FROM inserted WHERE status = 'pending' LIMIT 1) AS due
    WHERE CASE WHEN pg_try_advisory_lock(hashtext('skiplock_idle/' || %(channel)s), hashtext(%(queue)s::text))
               THEN NOT pg_advisory_unlock(hashtext('skiplock_idle/' || %(channel)s), hashtext(%(queue)s::text))
               ELSE true END  -- a worker is idle (or the key is busy): notify
)
SELECT (SELECT array_agg(inserted.id ORDER BY inserted.id) FROM inserted),
       (SELECT array_agg(DISTINCT needed.id ORDER BY needed.id) FROM needed WHERE NOT needed.known)
FROM woken;

-- name: job_release_waiting
-- Decide up to %(limit)s waiting jobs with ids above %(after_id)s, in id order: when every job
-- each depends on is done, 'pending' (or 'scheduled' until its run_at); when one failed or was
-- cancelled, 'cancelled' saying which.  Others keep waiting.  Wakes the workers of queues that
-- got pending jobs.  Returns per queue the jobs released and cancelled, with how many waiting
-- jobs it read and the last id read (one row with a NULL queue when it changed none).
-- The waiting jobs are read without locking them (a lock is a write: a leader reading 1,000
-- jobs ten times a second while they wait wrote their pages and WAL each time); the update
-- locks the few it changes and checks again that they still wait, waiting at most 2 s for a
-- session holding one (as leader_acquire, runtime.sql).
WITH wait AS MATERIALIZED (
    SELECT set_config('lock_timeout', '2s', true) AS setting
), candidates AS (
    SELECT id FROM {jobs}
    WHERE status = 'waiting' AND id > %(after_id)s
    ORDER BY id
    LIMIT %(limit)s
), needed AS (
    SELECT c.id, d.depends_on,
           coalesce((SELECT j.status FROM {jobs} AS j WHERE j.id = d.depends_on),
                    (SELECT a.status FROM {archive} AS a WHERE a.id = d.depends_on),
                    'done') AS status
    FROM candidates AS c
    LEFT JOIN {dependencies} AS d ON d.job_id = c.id
), decided AS (
    SELECT id,
           min(depends_on) FILTER (WHERE status IN ('failed', 'cancelled')) AS broken_by,
           bool_and(status = 'done' OR depends_on IS NULL) AS ready
    FROM needed
    GROUP BY id
), changed AS (
    UPDATE {jobs} AS j
    SET status = CASE WHEN d.broken_by IS NOT NULL THEN 'cancelled'
                      WHEN j.run_at > now() THEN 'scheduled' ELSE 'pending' END,
        finished_at = CASE WHEN d.broken_by IS NOT NULL THEN now() END,
        last_error = CASE WHEN d.broken_by IS NOT NULL THEN
            format('not run: job %%s, which it depends on, is %%s', d.broken_by,
                   (SELECT n.status FROM needed AS n
                    WHERE n.id = d.id AND n.depends_on = d.broken_by)) END
    FROM decided AS d, wait
    WHERE j.id = d.id AND j.status = 'waiting' AND (d.broken_by IS NOT NULL OR d.ready)
    RETURNING j.id, j.queue, j.status
), unlinked AS (
    DELETE FROM {dependencies} AS d USING changed WHERE d.job_id = changed.id
), per_queue AS (
    SELECT queue, count(*) FILTER (WHERE status <> 'cancelled') AS released,
           count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE status = 'pending') AS pending
    FROM changed
    GROUP BY queue
)
SELECT q.queue, q.released, q.cancelled, r.n, r.last_id,
       CASE WHEN q.pending > 0 THEN pg_notify(%(channel)s, q.queue) END
FROM per_queue AS q, (SELECT count(*) AS n, max(id) AS last_id FROM candidates) AS r
UNION ALL
SELECT NULL, 0, 0, r.n, r.last_id, NULL
FROM (SELECT count(*) AS n, max(id) AS last_id FROM candidates) AS r
WHERE NOT EXISTS (SELECT 1 FROM per_queue);

-- name: job_dependencies_prune
-- Forget what jobs no longer waiting (cancelled by an admin, retried, deleted) waited for;
-- waits at most 2 s on a lock, as leader_acquire (runtime.sql).
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
DELETE FROM {dependencies} AS d USING wait
WHERE NOT EXISTS (SELECT 1 FROM {jobs} AS j WHERE j.id = d.job_id AND j.status = 'waiting');

-- name: job_dependencies_of
-- The jobs job %(id)s waits for and the state of each, in id order.
SELECT d.depends_on,
       coalesce((SELECT j.status FROM {jobs} AS j WHERE j.id = d.depends_on),
                (SELECT a.status FROM {archive} AS a WHERE a.id = d.depends_on), 'done')
FROM {dependencies} AS d
WHERE d.job_id = %(id)s
ORDER BY d.depends_on;
