-- Statements of skiplock.testing, the helpers for users' own tests (never run by a worker).
-- Placeholders as in jobs.sql.

-- name: job_find_waiting
-- The jobs of task %(task)s not yet started (waiting, scheduled or pending), of queue
-- %(queue)s (NULL: any), whose payload contains %(payload)s (JSON containment: nested objects
-- match by their own fields), oldest first.
SELECT id, queue, task, payload, status, priority, run_at, attempts, max_attempts, locked_by,
       locked_until, locked_at, entity_key, idempotency_key, created_at, meta, expires_at,
       last_error, finished_at, result
FROM {jobs}
WHERE task = %(task)s
  AND status IN ('waiting', 'scheduled', 'pending')
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND payload @> %(payload)s::jsonb
ORDER BY id;

-- name: job_make_scheduled_due
-- Make every scheduled job of the queues %(queues)s due now: jobs enqueued with a delay, and
-- retries waiting out their backoff (those whose time has come already keep their run_at).
UPDATE {jobs}
SET status = 'pending', run_at = least(run_at, now())
WHERE status = 'scheduled'
  AND queue = ANY(%(queues)s::text[]);
