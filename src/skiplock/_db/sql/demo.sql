-- Statements of `skiplock demo` only (src/skiplock/_demo/command*.py); skiplock itself never runs them.
-- Part 1 runs the three dequeue patterns (docs/demo.md) against the demo schema's own
-- jobs table, one queue per run.  Part 2 adds two small tables of its own to that schema: the
-- orders of the transactional-enqueue example and the side effects the crash-test tasks leave.

-- name: demo_session_setup
-- Part 1 connections: commits do not wait for the WAL flush, so runs measure locking, not disks.
SET synchronous_commit = off;

-- name: demo_pattern_jobs_insert
-- Part 1: put %(n)s pending jobs into one queue, all due now, to be claimed in id order.
INSERT INTO {jobs} (queue, task, payload, status)
SELECT %(queue)s, 'demo.pattern', jsonb_build_object('n', g), 'pending'
FROM generate_series(1, %(n)s) AS g;

-- name: demo_naive_peek
-- Naive dequeue, step 1: read the head of the queue without locking it.
SELECT id FROM {jobs}
WHERE status = 'pending' AND queue = %(queue)s
ORDER BY priority, run_at, id
LIMIT 1;

-- name: demo_naive_claim
-- Naive dequeue, step 2: mark the job read in step 1 running, whoever else took it meanwhile.
UPDATE {jobs}
SET status = 'running', attempts = attempts + 1, locked_by = %(worker)s, locked_at = now(),
    locked_until = now() + interval '5 minutes'
WHERE id = %(id)s;

-- name: demo_claim_wait
-- Plain FOR UPDATE dequeue: lock the head row, waiting for whoever holds it to commit.
UPDATE {jobs}
SET status = 'running', attempts = attempts + 1, locked_by = %(worker)s, locked_at = now(),
    locked_until = now() + interval '5 minutes'
WHERE id = (
    SELECT id FROM {jobs}
    WHERE status = 'pending' AND queue = %(queue)s
    ORDER BY priority, run_at, id
    LIMIT 1
    FOR UPDATE
)
RETURNING id;

-- name: demo_claim_skip
-- FOR UPDATE SKIP LOCKED dequeue: lock the first row nobody holds, never wait.
UPDATE {jobs}
SET status = 'running', attempts = attempts + 1, locked_by = %(worker)s, locked_at = now(),
    locked_until = now() + interval '5 minutes'
WHERE id = (
    SELECT id FROM {jobs}
    WHERE status = 'pending' AND queue = %(queue)s
    ORDER BY priority, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING id;

-- name: demo_job_done
-- Part 1: mark a claimed job done (all three patterns).
UPDATE {jobs} SET status = 'done', finished_at = now() WHERE id = %(id)s;

-- name: demo_pattern_tally
-- Part 1: jobs of one run, claims made (attempts), claims beyond the first per job, unfinished.
SELECT count(*) AS jobs,
       coalesce(sum(attempts), 0) AS claims,
       coalesce(sum(attempts - 1) FILTER (WHERE attempts > 1), 0) AS duplicates,
       count(*) FILTER (WHERE status <> 'done') AS unfinished
FROM {jobs} WHERE queue = %(queue)s;

-- name: demo_lock_waits
-- Part 1: how many of the given backends wait for another transaction's row lock right now.
SELECT count(*) FROM pg_stat_activity
WHERE pid = ANY(%(pids)s::int[]) AND wait_event_type = 'Lock'
  AND wait_event IN ('transactionid', 'tuple');

-- name: demo_jobs_reset
-- Between the parts: part 1's jobs go, and part 2's are numbered from 1.
TRUNCATE {jobs} RESTART IDENTITY;

-- name: demo_tables_create
-- Part 2: the demo's business table (orders) and its record of task side effects.
CREATE TABLE IF NOT EXISTS {schema}.demo_orders (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer    text        NOT NULL,
    total_cents integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {schema}.demo_effects (
    job_id  bigint      NOT NULL,
    attempt integer     NOT NULL,
    pid     integer     NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);

-- name: demo_order_insert
-- Part 2: the business write that the receipt job is enqueued with, in the same transaction.
INSERT INTO {schema}.demo_orders (customer, total_cents)
VALUES (%(customer)s, %(total_cents)s)
RETURNING id;

-- name: demo_order_count
-- Part 2: whether an order exists (1) or not (0).
SELECT count(*) FROM {schema}.demo_orders WHERE id = %(id)s;

-- name: demo_effect_record
-- Part 2: a task's side effect, written outside the job's transaction so a crash keeps it.
INSERT INTO {schema}.demo_effects (job_id, attempt, pid) VALUES (%(job)s, %(attempt)s, %(pid)s);

-- name: demo_effect_list
-- Part 2: the side effects left by the given jobs, oldest first.
SELECT job_id, attempt, pid FROM {schema}.demo_effects
WHERE job_id = ANY(%(ids)s::bigint[])
ORDER BY at;

-- name: demo_jobs_tally
-- Part 2: how many of the given jobs are in each status (missing ones are not counted).
SELECT status, count(*) FROM {jobs} WHERE id = ANY(%(ids)s::bigint[]) GROUP BY status;
