-- Every statement skiplock runs against the jobs table.  Each block starts with
-- "-- name: <noun>_<verb>" and a one-line description.  {jobs}, {archive} and
-- {migrations} are replaced by quoted, schema-qualified identifiers; %(x)s are bound
-- parameters.  State changes always name the state they expect and, for a claimed job,
-- the claim: its owner (locked_by), attempt number and time (locked_at).  The time makes a
-- claim unique: a worker and attempt can repeat (a claim the server forgot in a crash, its
-- attempt with it; a job given back unstarted, its attempt unspent).  A write names each
-- claim's time by its place in %(claim_times)s (a batch's jobs share a few claim times, each
-- claim statement's now()), so a job costs one more small integer, not a timestamp.
--
-- A claimed job is found by id, one primary-key lookup per claim; its ownership test is
-- wrapped in coalesce(..., false), which hides it from the planner (why, and what it saved:
-- docs/design.md, "Ownership tests hidden from the planner").
--
-- The claims keep their LIMIT visible to the planner, and a claim of at most SMALL_CLAIM jobs
-- runs a copy of its statement with the number written in for %(limit)s, whose generic plan
-- the server reuses (docs/design.md, "Claim plans and the LIMIT written in").

-- name: job_insert_many
-- Insert jobs given as parallel arrays, each with its own options (a mixed batch; one call's
-- jobs go through job_insert_batch or job_insert_one); skip those whose idempotency key is
-- already unfinished.
-- Sends one NOTIFY per queue that got a due job while a worker of that queue is idle (see
-- channel_idle_hold); delivered when the caller's transaction commits.
-- A job with a fair_key due now takes its key's next turn as its run_at (the trigger of
-- migration 0027), the next jobs of its key in this statement one microsecond apart each.
WITH input AS (
    SELECT i.*, coalesce(i.at, now() + make_interval(secs => coalesce(i.delay, 0))) AS due
    FROM unnest(
        %(queue)s::text[], %(task)s::text[], %(payload)s::jsonb[], %(priority)s::int[],
        %(run_at)s::timestamptz[], %(delay)s::float8[], %(max_attempts)s::int[],
        %(entity_key)s::text[], %(idempotency_key)s::text[], %(meta)s::jsonb[],
        %(expires_at)s::timestamptz[], %(expires_in)s::float8[], %(fair_key)s::text[],
        %(limit_key)s::text[]
    ) WITH ORDINALITY AS i(queue, task, payload, priority, at, delay, max_attempts,
                           entity_key, idempotency_key, meta, expires_at, expires_in, fair_key,
                           limit_key, ord)
), inserted AS (
    INSERT INTO {jobs} (queue, task, payload, priority, run_at, max_attempts,
                        entity_key, idempotency_key, meta, expires_at, fair_key, limit_key,
                        status)
    SELECT queue, task, payload, priority, due, max_attempts, entity_key, idempotency_key, meta,
           coalesce(expires_at, now() + make_interval(secs => expires_in)), fair_key, limit_key,
           CASE WHEN due > now() THEN 'scheduled' ELSE 'pending' END
    FROM input
    ORDER BY ord
    ON CONFLICT (idempotency_key)
        WHERE idempotency_key IS NOT NULL AND status IN ('waiting', 'scheduled', 'pending', 'running')
        DO NOTHING
    RETURNING id, queue, status, idempotency_key
), woken AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted WHERE status = 'pending') AS q
    WHERE CASE WHEN pg_try_advisory_lock(hashtext('skiplock_idle/' || %(channel)s), hashtext(q.queue))
               THEN NOT pg_advisory_unlock(hashtext('skiplock_idle/' || %(channel)s), hashtext(q.queue))
               ELSE true END  -- a worker is idle (or the key is busy): notify
)
SELECT inserted.id, inserted.idempotency_key FROM inserted, woken ORDER BY inserted.id;

-- name: job_insert_batch
-- Insert jobs that share every column but the payload, given as one JSON array, none having an
-- idempotency key (so no conflict to arbitrate); returns their ids in input order.  One
-- NOTIFY for the queue if they are due and a worker of it is idle (see channel_idle_hold);
-- delivered when the caller's transaction commits.
-- With a fair_key, due now: the jobs take their key's next turns, one microsecond apart (see
-- job_insert_many).
WITH input AS (
    SELECT coalesce(%(run_at)s::timestamptz,
                    now() + make_interval(secs => coalesce(%(delay)s::float8, 0))) AS due
), inserted AS (
    INSERT INTO {jobs} (queue, task, payload, priority, run_at, max_attempts, entity_key, meta,
                        expires_at, fair_key, limit_key, status)
    SELECT %(queue)s::text, %(task)s::text, p.payload, %(priority)s::int,
           input.due,
           %(max_attempts)s::int, %(entity_key)s::text, %(meta)s::jsonb,
           coalesce(%(expires_at)s::timestamptz,
                    now() + make_interval(secs => %(expires_in)s::float8)),
           %(fair_key)s::text, %(limit_key)s::text,
           CASE WHEN input.due > now() THEN 'scheduled' ELSE 'pending' END
    FROM input, jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS p(payload, ord)
    ORDER BY p.ord
    RETURNING id, status
), woken AS (
    SELECT count(pg_notify(%(channel)s, %(queue)s::text)) AS n
    FROM (SELECT 1 FROM inserted WHERE status = 'pending' LIMIT 1) AS due
    WHERE CASE WHEN pg_try_advisory_lock(hashtext('skiplock_idle/' || %(channel)s), hashtext(%(queue)s::text))
               THEN NOT pg_advisory_unlock(hashtext('skiplock_idle/' || %(channel)s), hashtext(%(queue)s::text))
               ELSE true END  -- a worker is idle (or the key is busy): notify
)
SELECT array_agg(inserted.id ORDER BY inserted.id) FROM inserted, woken;

-- name: job_insert_one
-- Insert one job, unless an unfinished job holds its idempotency key; returns its id (no row
-- when skipped).  NOTIFY for its queue if it is due and a worker of it is idle (see
-- channel_idle_hold); delivered when the transaction commits.
-- With a fair_key, due now: the job takes its key's next turn (see job_insert_many).
WITH input AS (
    SELECT coalesce(%(run_at)s::timestamptz,
                    now() + make_interval(secs => coalesce(%(delay)s::float8, 0))) AS due
), inserted AS (
    INSERT INTO {jobs} (queue, task, payload, priority, run_at, max_attempts,
                        entity_key, idempotency_key, meta, expires_at, fair_key, limit_key,
                        status)
    SELECT %(queue)s::text, %(task)s::text, %(payload)s::jsonb, %(priority)s::int,
           input.due,
           %(max_attempts)s::int, %(entity_key)s::text, %(idempotency_key)s::text,
           %(meta)s::jsonb,
           coalesce(%(expires_at)s::timestamptz,
                    now() + make_interval(secs => %(expires_in)s::float8)),
           %(fair_key)s::text, %(limit_key)s::text,
           CASE WHEN input.due > now() THEN 'scheduled' ELSE 'pending' END
    FROM input
    ON CONFLICT (idempotency_key)
        WHERE idempotency_key IS NOT NULL AND status IN ('waiting', 'scheduled', 'pending', 'running')
        DO NOTHING
    RETURNING id, status
), woken AS (
    SELECT count(pg_notify(%(channel)s, %(queue)s::text)) AS n
    FROM (SELECT 1 FROM inserted WHERE status = 'pending') AS due
    WHERE CASE WHEN pg_try_advisory_lock(hashtext('skiplock_idle/' || %(channel)s), hashtext(%(queue)s::text))
               THEN NOT pg_advisory_unlock(hashtext('skiplock_idle/' || %(channel)s), hashtext(%(queue)s::text))
               ELSE true END  -- a worker is idle (or the key is busy): notify
)
SELECT inserted.id FROM inserted, woken;

-- name: job_find_unfinished_by_idempotency_keys
-- The unfinished job holding each of the given idempotency keys.
SELECT id, idempotency_key FROM {jobs}
WHERE idempotency_key = ANY(%(keys)s::text[])
  AND status IN ('waiting', 'scheduled', 'pending', 'running');

-- name: job_claim
-- Claim up to %(limit)s pending jobs of one queue, best priority then oldest run_at first.
-- Rows other workers hold are skipped, not waited on; jobs whose entity key already has a
-- running job are left alone (one index probe each: see migration 0004), and at most one job
-- per entity key is taken (the first in claim order; a sort of the locked jobs that have a key,
-- not a comparison of each with all the others).
-- Jobs past their expires_at are skipped (the maintenance leader cancels them): a NULL check
-- per candidate for jobs without one (docs/design.md, "The claim skips expired jobs").
-- Jobs whose limit_key has limits are left to job_claim_key_limited: a NULL check per
-- candidate without a key (docs/design.md, "Limits per key").
-- The claim index is read from the worker's last claimed key (after_priority, after_run_at,
-- after_id; NULLs read the whole index): every job of a better priority, then the jobs after
-- that key.  Skipped are the same priority's entries before the key: mostly jobs already
-- claimed, whose entries stay in the index until vacuum may remove them (which a long
-- transaction holds off: they pile up, and a claim from the lowest key walks all of them),
-- plus the few jobs that became due since with an older run_at (promoted, released).  The
-- worker claims from the lowest key again at least every second and after a short claim.
-- A leased claim commits asynchronously (commit_async): losing it in a server crash puts the
-- jobs back to pending, which an at-least-once queue allows, and saves the claim the WAL flush
-- (the one slow step of an idle worker's pick-up).  A held-lock claim must not: its
-- transaction also writes the job's outcome.
-- The payload comes back as JSON text, which the worker decodes itself (Job.from_claimed_row),
-- faster than psycopg's jsonb loader (docs/design.md, "Payloads as JSON text, decoded by the
-- worker").
-- A held-lock claim also marks its transaction as running a job of the queue until the
-- transaction ends: it locks its session's row of the queue in held_runs (run_mark,
-- migration 0024), a row lock only a worker may take, which queue_running_count and
-- queue_status count (every other session sees the job's row as pending), and by which
-- job_get and job_list show the job running (its row's xmax is the same transaction).  It
-- still takes the advisory markers of the last version (held_marker: its queue's key and
-- its id's), which that version's workers count; a stranger may hold them, which only doctor
-- reports now.  All are taken here, not by a statement of their own, to save a round trip (docs/design.md, "Held-lock markers taken by the
-- claim"; nor pipelined with BEGIN and the claim: psycopg's pipeline sends a Flush after its Sync, after
-- which PostgreSQL 15 leaves idle_in_transaction_session_timeout unarmed, and a held-lock
-- job's session would outlive it; see test_held_sessions.py).  A claim that takes no job
-- commits at once, ending its marker.
WITH keys_idle AS MATERIALIZED (
    -- Whether no held-lock job with an entity key runs: row -1 of the slots is free of the KEY
    -- SHARE locks entity_key_hold takes (migration 0020).  Read by a leased claim only, once,
    -- at its first keyed candidate (a CTE no one reads is not run): then it keeps the row
    -- until it commits, so no held-lock claim takes a key meanwhile (one waits for it, before
    -- writing anything), and the slots of its candidates need no reading.  Taken by another
    -- leased claim: false, and the slots are read.
    SELECT count(*) = 1 AS idle
    FROM (SELECT FROM {held_key_slots} WHERE slot = -1 FOR UPDATE SKIP LOCKED) AS free
), better AS (
    SELECT id, entity_key, priority, run_at
    FROM {jobs} AS c
    WHERE c.status = 'pending' AND c.queue = %(queue)s
      AND c.priority < coalesce(%(after_priority)s::int, -2147483648)
      AND (c.entity_key IS NULL OR NOT {entity_key_running}(c.entity_key)
           AND NOT CASE WHEN NOT %(held_marker)s::bool AND (SELECT idle FROM keys_idle) THEN false
                        ELSE {entity_key_held}(%(schema)s, c.entity_key) END)
      AND (c.expires_at IS NULL OR c.expires_at > now())
      AND (c.limit_key IS NULL OR NOT {key_limited}(c.limit_key))
    ORDER BY c.priority, c.run_at, c.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), after AS (
    SELECT id, entity_key, priority, run_at
    FROM {jobs} AS c
    WHERE c.status = 'pending' AND c.queue = %(queue)s
      AND (c.priority, c.run_at, c.id)
          > (coalesce(%(after_priority)s::int, -2147483648),
             coalesce(%(after_run_at)s::timestamptz, '-infinity'),
             coalesce(%(after_id)s::bigint, 0))
      AND (c.entity_key IS NULL OR NOT {entity_key_running}(c.entity_key)
           AND NOT CASE WHEN NOT %(held_marker)s::bool AND (SELECT idle FROM keys_idle) THEN false
                        ELSE {entity_key_held}(%(schema)s, c.entity_key) END)
      AND (c.expires_at IS NULL OR c.expires_at > now())
      AND (c.limit_key IS NULL OR NOT {key_limited}(c.limit_key))
    ORDER BY c.priority, c.run_at, c.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), locked AS (
    -- All the better jobs and the first of the others; rows locked but not taken here are
    -- unlocked when the claim commits.
    SELECT * FROM better UNION ALL SELECT * FROM after
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
), picked AS (
    -- Of locked jobs sharing an entity key, only the first in claim order.  Jobs without a
    -- key are taken as they are: only the keyed ones are sorted (docs/design.md, "One job per
    -- entity key: only the keyed jobs sorted").  The
    -- UPDATE finds the picked rows by primary key (= ANY of an array): joined to this union,
    -- whose row count the planner cannot guess, it chose a hash join over a scan of the table
    -- once statistics showed many rows.
    SELECT l.id, l.entity_key FROM locked AS l WHERE l.entity_key IS NULL
    UNION ALL
    (SELECT DISTINCT ON (l.entity_key) l.id, l.entity_key
     FROM locked AS l
     WHERE l.entity_key IS NOT NULL
     ORDER BY l.entity_key, l.priority, l.run_at, l.id)
), commit_mode AS MATERIALIZED (
    -- With commit_async, the commit of this transaction does not wait for its WAL to reach
    -- disk (a setting local to the transaction: never left on a session or pooled server).
    SELECT set_config('synchronous_commit',
        CASE WHEN %(commit_async)s::bool THEN 'off' ELSE current_setting('synchronous_commit') END,
        true) AS setting,
        -- A leased claim waits at most 1 s on a lock (a claim taking the same entity key: see
        -- migrations 0016 and 0020); not a held-lock claim, whose transaction runs the job.
        set_config('lock_timeout',
            CASE WHEN %(held_marker)s::bool THEN current_setting('lock_timeout') ELSE '1s' END,
            true) AS lock_wait
), held_marker AS MATERIALIZED (
    -- Tried, never waited for: a stranger may hold the key (the count of a limited queue then
    -- refuses to count: see queue_running_count).
    SELECT count(*) FILTER (WHERE pg_try_advisory_xact_lock_shared(
               hashtext('skiplock_held_job'), hashtext(%(schema)s || '/' || %(queue)s))) AS taken
    FROM (SELECT WHERE %(held_marker)s::bool) AS held
), run_mark AS MATERIALIZED (
    -- The row of this session for the queue in held_runs, locked until the transaction ends
    -- (migration 0024): read, so locked, only once a held-lock claim has picked its job.  Not
    -- registered yet: held_run_mark inserts it.  FOR UPDATE, which no other row lock shares:
    -- under a shared lock (a FOR KEY SHARE of any other worker-role session) the row xmax
    -- became a multixact, which xact_running does not read, and the job showed pending.
    SELECT true AS marked FROM {held_runs}
    WHERE queue = %(queue)s AND pid = pg_backend_pid()
    FOR UPDATE
)
UPDATE {jobs} AS j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s, locked_at = now(),
    locked_until = now() + make_interval(secs => %(lease_seconds)s)
FROM commit_mode, held_marker
-- A held-lock claim marks each job it takes here, where only the picked jobs are read (as a
-- condition of the UPDATE, a scan of a small table marked every row it read; as a CTE of its
-- own, picked was read twice, and so stored; docs/design.md, "Held-lock job markers in the
-- claim's UPDATE").  The job
-- marker is tried and its outcome ignored (only a stranger's lock can refuse it), and the
-- session's row of the queue locked (run_mark, read only here, so only once a job is picked:
-- what counts the job and shows it running; docs/design.md, "Running held-lock jobs: row locks
-- of their sessions").  The job's entity key is taken too (entity_key_hold: a row lock on the key's
-- slot, which only the worker role may take, migration 0020), or the claim fails as a lost
-- entity-key race.  A leased claim checks the keys of its picks again,
-- so that a held-lock claim that took one since its scan is not waited for.
WHERE j.id = ANY (ARRAY(
    SELECT p.id FROM picked AS p
    WHERE CASE WHEN NOT %(held_marker)s::bool
               THEN p.entity_key IS NULL
                    OR NOT CASE WHEN (SELECT idle FROM keys_idle) THEN false
                                ELSE {entity_key_held}(%(schema)s, p.entity_key) END
               WHEN pg_try_advisory_xact_lock_shared(
                        hashtext('skiplock_held_job_id/' || %(schema)s), p.id::bit(32)::int)
               THEN (p.entity_key IS NULL OR {entity_key_hold}(%(schema)s, p.entity_key))
                    AND coalesce((SELECT marked FROM run_mark), {held_run_mark}(%(queue)s))
               ELSE (p.entity_key IS NULL OR {entity_key_hold}(%(schema)s, p.entity_key))
                    AND coalesce((SELECT marked FROM run_mark), {held_run_mark}(%(queue)s))
          END))
RETURNING j.id, j.queue, j.task, j.payload::text, j.status, j.priority, j.run_at, j.attempts,
          j.max_attempts, j.locked_by, j.locked_until, j.locked_at, j.entity_key,
          j.idempotency_key, j.created_at, j.meta, j.expires_at;

-- name: transaction_begin
-- Start a transaction on an autocommit connection (a held-lock claim, before its claim).
BEGIN;

-- name: job_claim_candidates_from_queues
-- The best pending job of each of %(queues)s (id, queue), in the order of %(queues)s (the
-- worker rotates it from claim to claim, so that the queues take turns: docs/design.md, "Fair
-- shares: queues take turns"): the jobs a held-lock claim across several queues tries in turn
-- (job_claim_by_id).  Run on its own, in
-- autocommit: it locks one job per queue to skip the rows other sessions hold, and those locks
-- end with it.  In the held-lock transaction, the jobs it did not take would stay locked,
-- unclaimable by anyone, for as long as the job it took runs.  Locking gives the statement a
-- transaction: it commits without waiting for a WAL flush, as it writes nothing worth one.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
SELECT c.id, q.name
FROM commit_mode, unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, place)
CROSS JOIN LATERAL (
    SELECT id, priority, run_at
    FROM {jobs} AS c
    WHERE c.status = 'pending' AND c.queue = q.name
      AND (c.entity_key IS NULL OR NOT {entity_key_running}(c.entity_key)
           AND NOT {entity_key_held}(%(schema)s, c.entity_key))
      AND (c.expires_at IS NULL OR c.expires_at > now())
      AND (c.limit_key IS NULL OR NOT {key_limited}(c.limit_key))
    ORDER BY c.priority, c.run_at, c.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
) AS c
ORDER BY q.place;

-- name: job_claim_by_id
-- Claim one pending job by id, in a held-lock claim's transaction (after
-- job_claim_candidates_from_queues chose it); nothing if another session took or holds it
-- meanwhile, or its entity key has a running job now.  Takes the held-lock markers of the
-- job's queue, %(queue)s, and of the job, its entity key, and its session's row of the queue
-- in held_runs, as job_claim does for a held-lock claim.
WITH held_marker AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock_shared(hashtext('skiplock_held_job'),
                                            hashtext(%(schema)s || '/' || %(queue)s)) AS taken
), run_mark AS MATERIALIZED (
    -- As in job_claim.
    SELECT true AS marked FROM {held_runs}
    WHERE queue = %(queue)s AND pid = pg_backend_pid()
    FOR UPDATE
)
UPDATE {jobs} AS j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s, locked_at = now(),
    locked_until = now() + make_interval(secs => %(lease_seconds)s)
FROM held_marker
WHERE j.id = (SELECT c.id FROM {jobs} AS c
              WHERE c.id = %(id)s AND c.status = 'pending'
                          AND (c.entity_key IS NULL OR NOT {entity_key_running}(c.entity_key)
                     AND NOT {entity_key_held}(%(schema)s, c.entity_key))
                AND (c.expires_at IS NULL OR c.expires_at > now())
                AND (c.limit_key IS NULL OR NOT {key_limited}(c.limit_key))
              FOR UPDATE SKIP LOCKED)
  AND CASE WHEN pg_try_advisory_xact_lock_shared(hashtext('skiplock_held_job_id/' || %(schema)s),
                                                 j.id::bit(32)::int)
           THEN (j.entity_key IS NULL OR {entity_key_hold}(%(schema)s, j.entity_key))
                AND coalesce((SELECT marked FROM run_mark), {held_run_mark}(%(queue)s))
           ELSE (j.entity_key IS NULL OR {entity_key_hold}(%(schema)s, j.entity_key))
                AND coalesce((SELECT marked FROM run_mark), {held_run_mark}(%(queue)s)) END
RETURNING j.id, j.queue, j.task, j.payload::text, j.status, j.priority, j.run_at, j.attempts,
          j.max_attempts, j.locked_by, j.locked_until, j.locked_at, j.entity_key,
          j.idempotency_key, j.created_at, j.meta, j.expires_at;

-- name: job_claim_from_queues
-- The same claim across several queues, each read from its own starting key (the arrays
-- after_priority, after_run_at, after_id, in the order of %(queues)s): the best jobs of each
-- queue, taken in turns: every queue's first, in the order of %(queues)s (the worker rotates
-- it from claim to claim), then every queue's second, and so on; a queue of weight w (the
-- array weights) takes w turns for another's one: its n-th job comes at (n - 1) / w.  Priority
-- and age order the jobs inside a queue, not across queues: a busy queue does not starve the
-- others (docs/design.md, "Fair shares: queues take turns").
WITH keys_idle AS MATERIALIZED (
    -- As in job_claim.
    SELECT count(*) = 1 AS idle
    FROM (SELECT FROM {held_key_slots} WHERE slot = -1 FOR UPDATE SKIP LOCKED) AS free
), locked AS (
    SELECT c.id, c.entity_key, c.priority, c.run_at
    FROM unnest(%(queues)s::text[], %(after_priority)s::int[], %(after_run_at)s::timestamptz[],
                %(after_id)s::bigint[], %(weights)s::int[])
         WITH ORDINALITY AS q(name, after_priority, after_run_at, after_id, weight, place)
    CROSS JOIN LATERAL (
        SELECT u.*, row_number() OVER (ORDER BY u.priority, u.run_at, u.id) AS turn
        FROM (
        SELECT * FROM (
            SELECT id, entity_key, priority, run_at
            FROM {jobs} AS c
            WHERE c.status = 'pending' AND c.queue = q.name
              AND c.priority < coalesce(q.after_priority, -2147483648)
              AND (c.entity_key IS NULL OR NOT {entity_key_running}(c.entity_key)
                   AND NOT CASE WHEN (SELECT idle FROM keys_idle) THEN false
                                ELSE {entity_key_held}(%(schema)s, c.entity_key) END)
              AND (c.expires_at IS NULL OR c.expires_at > now())
              AND (c.limit_key IS NULL OR NOT {key_limited}(c.limit_key))
            ORDER BY c.priority, c.run_at, c.id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS better
        UNION ALL
        SELECT * FROM (
            SELECT id, entity_key, priority, run_at
            FROM {jobs} AS c
            WHERE c.status = 'pending' AND c.queue = q.name
              AND (c.priority, c.run_at, c.id) > (coalesce(q.after_priority, -2147483648),
                                                   coalesce(q.after_run_at, '-infinity'),
                                                   coalesce(q.after_id, 0))
              AND (c.entity_key IS NULL OR NOT {entity_key_running}(c.entity_key)
                   AND NOT CASE WHEN (SELECT idle FROM keys_idle) THEN false
                                ELSE {entity_key_held}(%(schema)s, c.entity_key) END)
              AND (c.expires_at IS NULL OR c.expires_at > now())
              AND (c.limit_key IS NULL OR NOT {key_limited}(c.limit_key))
            ORDER BY c.priority, c.run_at, c.id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS after
        ) AS u
    ) AS c
    ORDER BY (c.turn - 1)::float8 / q.weight, q.place
    LIMIT %(limit)s
), picked AS (
    -- Of locked jobs sharing an entity key, only the first in claim order; found by primary
    -- key below, as in job_claim.
    SELECT l.id, l.entity_key FROM locked AS l WHERE l.entity_key IS NULL
    UNION ALL
    (SELECT DISTINCT ON (l.entity_key) l.id, l.entity_key
     FROM locked AS l
     WHERE l.entity_key IS NOT NULL
     ORDER BY l.entity_key, l.priority, l.run_at, l.id)
), commit_mode AS MATERIALIZED (
    -- With commit_async, the commit of this transaction does not wait for its WAL to reach
    -- disk (a setting local to the transaction: never left on a session or pooled server).
    SELECT set_config('synchronous_commit',
        CASE WHEN %(commit_async)s::bool THEN 'off' ELSE current_setting('synchronous_commit') END,
        true) AS setting,
        set_config('lock_timeout', '1s', true) AS lock_wait  -- as in job_claim
)
UPDATE {jobs} AS j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s, locked_at = now(),
    locked_until = now() + make_interval(secs => %(lease_seconds)s)
FROM commit_mode
WHERE j.id = ANY (ARRAY(
    SELECT p.id FROM picked AS p
    WHERE p.entity_key IS NULL
          OR NOT CASE WHEN (SELECT idle FROM keys_idle) THEN false
                      ELSE {entity_key_held}(%(schema)s, p.entity_key) END))
RETURNING j.id, j.queue, j.task, j.payload::text, j.status, j.priority, j.run_at, j.attempts,
          j.max_attempts, j.locked_by, j.locked_until, j.locked_at, j.entity_key,
          j.idempotency_key, j.created_at, j.meta, j.expires_at;

-- name: limits_lock_keys_for_claim
-- The limited keys (after %(after_key)s, in key order, at most %(keys)s) that have pending jobs in
-- %(queues)s, each row locked until the transaction ends -- serialising the claims of each key
-- across workers, so its limits hold exactly -- and skipped when another claim holds it (that
-- claim serves the key now).  With each key's concurrency limit and its rate budget: starts
-- its bucket allows now (NULL: no rate limit), read from the row as locked.  Run in the
-- transaction of job_claim_key_limited, before it (whose snapshot then sees every claim of
-- these keys that committed before the locks were taken).
SELECT k.key, k.concurrency_limit,
       CASE WHEN k.rate_limit IS NOT NULL THEN
           least(k.rate_limit::float8,
                 coalesce(k.rate_tokens, k.rate_limit::float8)
                 + k.rate_limit * extract(epoch FROM now() - coalesce(k.rate_refilled_at, now()))::float8
                   / k.rate_period) END
FROM {key_limits} AS k
WHERE k.key > coalesce(%(after_key)s::text, '')
  AND EXISTS (SELECT FROM {jobs} AS j
              WHERE j.status = 'pending' AND j.limit_key = k.key
                AND j.queue = ANY(%(queues)s::text[]))
ORDER BY k.key
LIMIT %(keys)s
FOR NO KEY UPDATE OF k SKIP LOCKED;

-- name: job_claim_key_limited
-- Claim up to %(limit)s pending jobs of %(queues)s whose limit_key is one of %(keys)s, which
-- limits_lock_keys_for_claim locked in this transaction: of each key no more than its room, its
-- concurrency limit less its running jobs (counted now, in this statement's snapshot: leased
-- ones by their status, held-lock ones by the slots of held_key_runs their transactions lock)
-- and its rate budget; best priority then oldest first in each key, the keys taking turns.
-- Spends the rate budget of each key by the jobs picked.  Leased; a held-lock claim takes
-- one job by job_claim_one_held_of_key.  Otherwise as job_claim_from_queues (entity keys,
-- expiry, commit_async).
WITH keys AS (
    SELECT k.key, k.budget,
           least(%(limit)s::int,
                 coalesce(k.concurrency
                          - (SELECT count(*)::int FROM {jobs} AS r
                             WHERE r.status = 'running' AND r.limit_key = k.key)
                          - (SELECT count(*)::int FROM {held_key_runs} AS h
                             WHERE h.key = k.key AND h.xmax <> '0'::xid AND {xact_running}(h.xmax)),
                          %(limit)s::int),
                 coalesce(floor(k.budget)::int, %(limit)s::int)) AS room
    FROM unnest(%(keys)s::text[], %(concurrency)s::int[], %(budget)s::float8[])
         AS k(key, concurrency, budget)
), locked AS (
    SELECT c.id, c.entity_key, c.priority, c.run_at, c.limit_key
    FROM keys
    CROSS JOIN LATERAL (
        SELECT u.*, row_number() OVER (ORDER BY u.priority, u.run_at, u.id) AS turn
        FROM (
            SELECT id, entity_key, priority, run_at, limit_key
            FROM {jobs} AS c
            WHERE c.status = 'pending' AND c.limit_key = keys.key
              AND c.queue = ANY(%(queues)s::text[])
              AND (c.entity_key IS NULL OR NOT {entity_key_running}(c.entity_key)
                   AND NOT CASE WHEN {entity_key_held}(%(schema)s, c.entity_key)
                                THEN {entity_key_locked_by_worker}(%(schema)s, c.entity_key)
                                ELSE false END)
              AND (c.expires_at IS NULL OR c.expires_at > now())
            ORDER BY c.priority, c.run_at, c.id
            LIMIT greatest(keys.room, 0)
            FOR UPDATE SKIP LOCKED
        ) AS u
    ) AS c
    ORDER BY c.turn, c.limit_key
    LIMIT %(limit)s
), picked AS (
    SELECT l.id, l.entity_key, l.limit_key FROM locked AS l WHERE l.entity_key IS NULL
    UNION ALL
    (SELECT DISTINCT ON (l.entity_key) l.id, l.entity_key, l.limit_key
     FROM locked AS l
     WHERE l.entity_key IS NOT NULL
     ORDER BY l.entity_key, l.priority, l.run_at, l.id)
), spent AS (
    -- A job picked but not claimed (an entity-key race) spends its start all the same: the
    -- budget errs on the side of the limit.
    UPDATE {key_limits} AS k
    SET rate_tokens = keys.budget - p.n, rate_refilled_at = now()
    FROM keys, (SELECT limit_key, count(*) AS n FROM picked GROUP BY limit_key) AS p
    WHERE k.key = keys.key AND p.limit_key = keys.key AND keys.budget IS NOT NULL
    RETURNING k.key
), commit_mode AS MATERIALIZED (
    SELECT set_config('synchronous_commit',
        CASE WHEN %(commit_async)s::bool THEN 'off' ELSE current_setting('synchronous_commit') END,
        true) AS setting,
        set_config('lock_timeout', '1s', true) AS lock_wait,  -- as in job_claim
        (SELECT count(*) FROM spent) AS spent
)
UPDATE {jobs} AS j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s, locked_at = now(),
    locked_until = now() + make_interval(secs => %(lease_seconds)s)
FROM commit_mode
WHERE j.id = ANY (ARRAY(
    SELECT p.id FROM picked AS p
    WHERE p.entity_key IS NULL
          OR NOT CASE WHEN {entity_key_held}(%(schema)s, p.entity_key)
                      THEN {entity_key_locked_by_worker}(%(schema)s, p.entity_key)
                      ELSE false END))
RETURNING j.id, j.queue, j.task, j.payload::text, j.status, j.priority, j.run_at, j.attempts,
          j.max_attempts, j.locked_by, j.locked_until, j.locked_at, j.entity_key,
          j.idempotency_key, j.created_at, j.meta, j.expires_at;

-- name: job_claim_one_held_of_key
-- Claim one pending job of %(queues)s whose limit_key is %(key)s, in a held-lock claim's
-- transaction, best priority then oldest first; the key's row of key_limits is locked by
-- another transaction of this worker, which found room for it (limits_key_rooms).  With
-- %(counted)s (the key has a concurrency limit), the job's transaction locks a free slot of
-- the key in held_key_runs (FOR UPDATE) until it ends, by which every later count of the key includes the
-- job however it ends (migration 0028); no free slot (cannot happen under the key's lock while
-- the count found room): nothing is claimed.  Otherwise as job_claim_by_id: the held-lock
-- markers of the job's queue and id, its session's row of the queue in held_runs, its entity
-- key.  Reads the key's pending jobs in jobs_limit_key_idx.
WITH key_slot AS MATERIALIZED (
    SELECT true AS locked FROM {held_key_runs}
    WHERE key = %(key)s
    LIMIT 1
    -- FOR UPDATE, which no other row lock shares: under a shared lock (a FOR KEY SHARE of
    -- any other worker-role session, however brief) the slot xmax became a multixact, which
    -- xact_running does not read, and the job stopped counting for the rest of its run.
    FOR UPDATE SKIP LOCKED
)
UPDATE {jobs} AS j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s, locked_at = now(),
    locked_until = now() + make_interval(secs => %(lease_seconds)s)
WHERE j.id = (SELECT c.id FROM {jobs} AS c
              WHERE c.status = 'pending' AND c.limit_key = %(key)s
                AND c.queue = ANY(%(queues)s::text[])
                AND (c.entity_key IS NULL OR NOT {entity_key_running}(c.entity_key)
                     AND NOT {entity_key_held}(%(schema)s, c.entity_key))
                AND (c.expires_at IS NULL OR c.expires_at > now())
              ORDER BY c.priority, c.run_at, c.id
              LIMIT 1
              FOR UPDATE SKIP LOCKED)
  -- The markers first (tried, their outcome ignored), then the marks that count the job.
  AND CASE WHEN pg_try_advisory_xact_lock_shared(hashtext('skiplock_held_job'),
                                                 hashtext(%(schema)s || '/' || j.queue))::int
                + pg_try_advisory_xact_lock_shared(
                      hashtext('skiplock_held_job_id/' || %(schema)s), j.id::bit(32)::int)::int
                >= 0
           THEN (NOT %(counted)s::bool OR coalesce((SELECT locked FROM key_slot), false))
                AND (j.entity_key IS NULL OR {entity_key_hold}(%(schema)s, j.entity_key))
                AND {held_run_mark}(j.queue)
           ELSE false END
RETURNING j.id, j.queue, j.task, j.payload::text, j.status, j.priority, j.run_at, j.attempts,
          j.max_attempts, j.locked_by, j.locked_until, j.locked_at, j.entity_key,
          j.idempotency_key, j.created_at, j.meta, j.expires_at;

-- name: job_complete_many
-- Mark claimed jobs done, if each claim still owns its job; returns the ids it changed.
UPDATE {jobs} AS j
SET status = 'done', finished_at = now(), locked_until = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[])
     AS c(id, attempts, claim_time)
WHERE j.id = c.id
  AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false)
RETURNING j.id;

-- name: job_complete_with_results_many
-- Mark claimed jobs done with what their tasks returned (tasks with store_result=True), if
-- each claim still owns its job; returns the ids it changed.
UPDATE {jobs} AS j
SET status = 'done', finished_at = now(), locked_until = NULL, result = c.result
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[],
            %(results)s::jsonb[])
     AS c(id, attempts, claim_time, result)
WHERE j.id = c.id
  AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false)
RETURNING j.id;

-- name: job_record_results
-- Store what the tasks of claimed jobs returned, just before they are archived in the same
-- transaction, if each claim still owns its job.
UPDATE {jobs} AS j
SET result = r.result
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[],
            %(results)s::jsonb[])
     AS r(id, attempts, claim_time, result)
WHERE j.id = r.id
  AND coalesce(j.attempts = r.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[r.claim_time], false);

-- name: job_delete_many
-- Delete claimed jobs that finished, if each claim still owns its job; the same statement
-- counts them for the dashboard's charts (finished_counts_add, migration 0026: rows inserted,
-- one per queue, never updated), since their rows no longer can.  The last SELECT reads the
-- count's CTE so that it runs (a CTE without a write runs only if read).
WITH gone AS (
    DELETE FROM {jobs} AS j
    USING unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[])
         AS c(id, attempts, claim_time)
    WHERE j.id = c.id
      AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
                   AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false)
    RETURNING j.id, j.queue, greatest(extract(epoch FROM j.locked_at - j.run_at), 0)::float8 AS wait
), counted AS (
    SELECT {finished_counts_add}(array_agg(now()), array_agg(queue), array_agg('done'::text),
                                 array_agg(wait)) AS counted_rows
    FROM gone
)
SELECT id FROM gone CROSS JOIN counted;

-- name: job_archive_many
-- Move claimed jobs that finished to the archive table, if each claim still owns its job; the
-- done attempt goes into its attempt_log (the archive keeps no locked_at to tell it from), and
-- the same statement counts them for the dashboard's charts, as job_delete_many does (and
-- reads the count's CTE so that it runs).
WITH moved AS (
    DELETE FROM {jobs} AS j
    USING unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[])
          AS c(id, attempts, claim_time)
    WHERE j.id = c.id
      AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
                   AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false)
    RETURNING j.*
), counted AS (
    SELECT {finished_counts_add}(array_agg(now()), array_agg(queue), array_agg('done'::text),
                                 array_agg(wait)) AS counted_rows
    FROM (SELECT queue, greatest(extract(epoch FROM locked_at - run_at), 0)::float8 AS wait
          FROM moved) AS m
)
INSERT INTO {archive} (id, queue, task, payload, status, priority, run_at, attempts,
                       max_attempts, locked_by, entity_key, idempotency_key, last_error,
                       created_at, finished_at, result, meta, expires_at, fair_key, limit_key,
                       attempt_log)
SELECT id, queue, task, payload, 'done', priority, run_at, attempts, max_attempts, locked_by,
       entity_key, idempotency_key, last_error, created_at, now(), result, meta, expires_at,
       fair_key, limit_key,
       {attempt_log_append}(attempt_log, jsonb_build_object(
           'attempt', attempts, 'worker', locked_by, 'started_at', locked_at,
           'ended_at', now(), 'outcome', 'done', 'error', NULL))
FROM moved CROSS JOIN counted
RETURNING id;

-- name: job_fail_many
-- Record failed attempts of claimed jobs that still own them: back to the queue after
-- retry_in seconds, or 'failed' when retry_in is NULL or the attempts are spent; each attempt
-- goes into the job's attempt_log (migration 0018).
WITH f AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[],
                         %(errors)s::text[], %(retry_in)s::float8[])
                  AS f(id, attempts, claim_time, error, retry_in)
)
UPDATE {jobs} AS j
SET status = CASE WHEN f.retry_in IS NULL OR j.attempts >= j.max_attempts THEN 'failed'
                  WHEN f.retry_in > 0 THEN 'scheduled'
                  ELSE 'pending' END,
    run_at = CASE WHEN f.retry_in IS NULL OR j.attempts >= j.max_attempts THEN j.run_at
                  ELSE now() + make_interval(secs => f.retry_in) END,
    finished_at = CASE WHEN f.retry_in IS NULL OR j.attempts >= j.max_attempts THEN now() END,
    last_error = f.error,
    attempt_log = {attempt_log_append}(j.attempt_log, jsonb_build_object(
        'attempt', j.attempts, 'worker', j.locked_by, 'started_at', j.locked_at,
        'ended_at', now(), 'error', left(f.error, 2000),
        'outcome', CASE WHEN f.retry_in IS NULL OR j.attempts >= j.max_attempts THEN 'failed'
                        ELSE 'retried' END)),
    locked_until = NULL
FROM f
WHERE j.id = f.id
  AND coalesce(j.attempts = f.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[f.claim_time], false)
RETURNING j.id, j.status;

-- name: job_snooze_many
-- Put claimed jobs back to run after delay seconds without spending an attempt
-- (max_attempts grows by one so the attempt counter stays a unique claim token; but not past
-- the column's largest value, which enqueue accepts: such a job spends the attempt instead).
UPDATE {jobs} AS j
SET status = CASE WHEN s.delay > 0 THEN 'scheduled' ELSE 'pending' END,
    run_at = now() + make_interval(secs => s.delay),
    max_attempts = j.max_attempts + (j.max_attempts < 2147483647)::int,
    attempt_log = {attempt_log_append}(j.attempt_log, jsonb_build_object(
        'attempt', j.attempts, 'worker', j.locked_by, 'started_at', j.locked_at,
        'ended_at', now(), 'outcome', 'snoozed', 'error', NULL)),
    locked_until = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[],
            %(delays)s::float8[]) AS s(id, attempts, claim_time, delay)
WHERE j.id = s.id
  AND coalesce(j.attempts = s.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[s.claim_time], false)
RETURNING j.id;

-- name: job_extend_leases
-- Heartbeat: push the lease of each claim that still owns its job; returns those it extended,
-- each with whether an admin asked to cancel it.  %(now)s: the time to count from (NULL: the
-- server's now(); tests pin it).
UPDATE {jobs} AS j
SET locked_until = coalesce(%(now)s::timestamptz, now())
                   + make_interval(secs => %(lease_seconds)s)
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[])
     AS c(id, attempts, claim_time)
WHERE j.id = c.id
  AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false)
RETURNING j.id, j.cancel_requested;

-- name: job_reclaim_expired
-- Requeue running jobs whose lease expired (the attempt stays spent); 'failed' when none is left.
-- A batch of %(limit)s: the caller runs it again while batches come back full.
-- run_at is kept, so a reclaimed job is among the first claimed again, not behind the backlog.
-- %(now)s: the time to compare leases with (NULL: the server's now(); tests pin it).
WITH expired AS (
    SELECT id FROM {jobs}
    WHERE status = 'running' AND locked_until < coalesce(%(now)s::timestamptz, now())
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {jobs} AS j
SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
    finished_at = CASE
        WHEN j.attempts >= j.max_attempts THEN coalesce(%(now)s::timestamptz, now())
    END,
    last_error = format('lease expired: worker %%s did not finish attempt %%s by %%s',
                        j.locked_by, j.attempts, j.locked_until),
    attempt_log = {attempt_log_append}(j.attempt_log, jsonb_build_object(
        'attempt', j.attempts, 'worker', j.locked_by, 'started_at', j.locked_at,
        'ended_at', coalesce(%(now)s::timestamptz, now()), 'outcome', 'lease expired',
        'error', format('lease expired: worker %%s did not finish attempt %%s by %%s',
                        j.locked_by, j.attempts, j.locked_until))),
    locked_until = NULL
FROM expired
WHERE j.id = expired.id AND j.status = 'running'
RETURNING j.id, j.status;

-- name: job_promote_due
-- Make scheduled jobs whose run_at has come claimable, and wake workers of their queues.  A
-- batch of %(limit)s: the caller runs it again while batches come back full (AsyncStore).
-- %(now)s: the time that has come (NULL: the server's now(); tests pin it).
WITH due AS (
    SELECT id FROM {jobs}
    WHERE status = 'scheduled' AND run_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE {jobs} AS j SET status = 'pending'
    FROM due WHERE j.id = due.id AND j.status = 'scheduled'
    RETURNING j.queue
)
SELECT q.queue, q.n, pg_notify(%(channel)s, q.queue)
FROM (SELECT queue, count(*) AS n FROM promoted GROUP BY queue) AS q;

-- name: queue_aging_steps
-- The queues with an aging step (migration 0028), and their steps: the ones job_age_pending
-- runs for.
SELECT name, aging_step FROM {queues} WHERE aging_step IS NOT NULL ORDER BY name;

-- name: job_age_pending
-- Aging (migration 0028): give pending jobs of queue %(queue)s the priority they have earned by
-- waiting, one level better (lower) per %(step)s seconds since their run_at, counted from the
-- priority they were enqueued with (kept in meta as "skiplock_aged_from" at their first step),
-- but never better than the best priority pending in the queue: a job that has reached it stays
-- there, before the newer jobs of that priority by its older run_at, and a queue of one
-- priority is never rewritten.  At most %(limit)s jobs a statement, the oldest of each level
-- first.  Reads the claim index only: the queue's priority levels by a skip scan (one probe
-- per level), then each level's jobs due for longer than a step, which are its first entries.
-- Jobs another transaction holds (a claim, a running held-lock job) are skipped.  One queue a
-- statement, its step a parameter: the planner's guess at a join with the queues table made
-- the statement cost enough to be compiled by JIT at every run (seconds).  Returns how many
-- jobs were aged.
WITH RECURSIVE levels AS (
    SELECT b.priority, b.priority AS best
    FROM (SELECT min(c.priority) AS priority FROM {jobs} AS c
          WHERE c.status = 'pending' AND c.queue = %(queue)s) AS b
    WHERE b.priority IS NOT NULL
    UNION ALL
    SELECT n.priority, l.best
    FROM levels AS l
    CROSS JOIN LATERAL (
        SELECT min(c.priority) AS priority FROM {jobs} AS c
        WHERE c.status = 'pending' AND c.queue = %(queue)s AND c.priority > l.priority
    ) AS n
    WHERE n.priority IS NOT NULL
), due AS (
    SELECT c.id, c.origin, c.target
    FROM levels AS l
    CROSS JOIN LATERAL (
        SELECT j.id, f.origin, greatest(l.best, f.origin - f.earned)::int AS target
        FROM {jobs} AS j
        -- The priority counted from: skiplock_aged_from of its meta only when it is a number
        -- an int holds (the producer writes meta: anything else is not a priority of ours and
        -- must not fail the statement for the queue), else its own priority.  The levels earned,
        -- in numeric and capped, so that a tiny step and a long wait cannot overflow.
        CROSS JOIN LATERAL (
            SELECT coalesce(
                       CASE WHEN jsonb_typeof(j.meta -> 'skiplock_aged_from') = 'number' THEN
                           CASE WHEN (j.meta -> 'skiplock_aged_from')::numeric
                                     BETWEEN -2147483648 AND 2147483647
                                THEN floor((j.meta -> 'skiplock_aged_from')::numeric)::bigint
                           END
                       END,
                       j.priority) AS origin,
                   least(floor(extract(epoch FROM now() - j.run_at) / %(step)s::float8::numeric),
                         4294967296)::bigint AS earned
        ) AS f
        WHERE j.status = 'pending' AND j.queue = %(queue)s AND j.priority = l.priority
          AND j.run_at <= now() - make_interval(secs => %(step)s::float8)
          AND greatest(l.best, f.origin - f.earned) < j.priority
        ORDER BY j.run_at, j.id
        LIMIT %(limit)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS c
    WHERE l.priority > l.best
    LIMIT %(limit)s
), aged AS (
    UPDATE {jobs} AS j
    SET priority = due.target,
        -- The priority counted from is kept (written over a value that was not one).
        meta = CASE WHEN j.meta -> 'skiplock_aged_from' = to_jsonb(due.origin) THEN j.meta
                    ELSE coalesce(j.meta, '{{}}'::jsonb)
                         || jsonb_build_object('skiplock_aged_from', due.origin) END
    FROM due
    -- The rows by primary key (= ANY of an array, as in job_claim): joined to due alone, the
    -- planner hashed the pending jobs of the claim index to find them.
    WHERE j.id = ANY (ARRAY(SELECT id FROM due)) AND j.id = due.id AND j.status = 'pending'
    RETURNING j.id
)
SELECT count(*) FROM aged;

-- name: job_next_due
-- Seconds until the next scheduled job is due, by the server's clock (NULL: none is scheduled;
-- 0 or less: one is due now): the leader sleeps until then (one probe of jobs_scheduled_idx).
-- And whether any job waits for others (one probe of jobs_waiting_idx): one made to wait after
-- the leader's last release read is then looked at between rounds too.
SELECT extract(epoch FROM min(run_at) - now())::float8,
       EXISTS (SELECT FROM {jobs} WHERE status = 'waiting')
FROM {jobs} WHERE status = 'scheduled';

-- name: job_cancel_expired
-- Cancel jobs not started by their expires_at (claims skip them already); returns how many
-- per queue.  %(now)s: the time to compare expiries with (NULL: the server's now(); tests
-- pin it).
WITH expired AS (
    SELECT id FROM {jobs}
    WHERE expires_at < coalesce(%(now)s::timestamptz, now())
      AND status IN ('waiting', 'scheduled', 'pending')
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE {jobs} AS j
    SET status = 'cancelled', finished_at = coalesce(%(now)s::timestamptz, now()),
        last_error = format('expired: not run by %%s', j.expires_at)
    FROM expired
    WHERE j.id = expired.id AND j.status IN ('waiting', 'scheduled', 'pending')
    RETURNING j.queue
)
SELECT queue, count(*) FROM cancelled GROUP BY queue;

-- name: job_get
-- One job by id, with its current state; a done job moved to the archive (completion
-- 'archive') is read from there (the move is one statement: a job is never in both).  A
-- held-lock job's row looks pending while its transaction runs it: it is shown running when
-- that transaction, which updated the row (its xmax), holds a row of its queue in held_runs
-- (see job_claim; a row lock only a worker may take, migration 0024).
(SELECT id, queue, task, payload,
        CASE WHEN status = 'pending' AND EXISTS (
                 SELECT FROM {held_runs} AS h
                 WHERE h.queue = j.queue AND h.xmax = j.xmax AND {xact_running}(h.xmax))
             THEN 'running' ELSE status END,
        priority, run_at, attempts, max_attempts, locked_by,
        locked_until, locked_at, entity_key, idempotency_key, created_at, meta, expires_at,
        last_error, finished_at, result
 FROM {jobs} AS j WHERE id = %(id)s)
UNION ALL
(SELECT id, queue, task, payload, status, priority, run_at, attempts, max_attempts, locked_by,
        NULL::timestamptz, NULL::timestamptz, entity_key, idempotency_key, created_at, meta,
        expires_at, last_error, finished_at, result
 FROM {archive} WHERE id = %(id)s)
LIMIT 1;

-- name: job_count_by_queue_and_status
-- How many jobs each queue has in each status.
SELECT queue, status, count(*) AS n FROM {jobs} GROUP BY queue, status ORDER BY queue, status;

-- name: channel_listen
-- Subscribe this session to the schema's wake-up notifications (payload: a queue name).
LISTEN {channel};

-- name: channel_idle_hold
-- Tell producers that this session's worker is idle on %(queues)s, waiting for a NOTIFY: a
-- shared advisory lock per queue, held by the session until channel_idle_release (or until it
-- ends).  A producer notifies a queue only when it cannot take that key's exclusive lock for a
-- moment (job_insert_*), so a stranger holding or waiting for the key only causes extra
-- notifications.  Waits for a holder at most the lock_timeout its transaction sets
-- (transaction_lock_timeout; docs/design.md, "Notifications only to idle workers").
SELECT /* listener of {channel} */ count(*) FROM unnest(%(queues)s::text[]) AS q,
     LATERAL (SELECT pg_advisory_lock_shared(hashtext('skiplock_idle/' || %(channel)s),
                                             hashtext(q))) AS held;

-- name: channel_idle_release
-- The worker is busy again: producers need not notify for it.  Drops the keys of %(queues)s
-- that this session holds (%(held)s: all of them, else those pg_locks lists, after a
-- channel_idle_hold that gave up part way), never another advisory lock: behind a
-- transaction-mode pooler the session may be another client's.
SELECT /* listener of {channel} */
       count(pg_advisory_unlock_shared(hashtext('skiplock_idle/' || %(channel)s), hashtext(q)))
FROM unnest(%(queues)s::text[]) AS q
WHERE %(held)s OR EXISTS (
    SELECT 1 FROM pg_locks AS l
    WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory' AND l.granted
      AND l.mode = 'ShareLock' AND l.objsubid = 2
      AND l.classid = hashtext('skiplock_idle/' || %(channel)s)::oid
      AND l.objid = hashtext(q)::oid);

-- name: transaction_lock_timeout
-- How long the rest of this transaction waits for a lock (the listener's wait behind a
-- stranger, in channel_idle_hold's transaction).
SELECT set_config('lock_timeout', %(timeout)s, true);

-- name: channel_notify
-- Send one notification on the schema's channel (the listener's self-test, admin wake-ups).
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: channel_notify_many
-- Send several notifications on the schema's channel in one statement (an admin's requests to
-- cancel held-lock jobs).
SELECT pg_notify(%(channel)s, payload) FROM unnest(%(payloads)s::text[]) AS payload;

-- name: job_cancel_claimed_many
-- Mark running jobs cancelled (an admin asked while they ran), if each claim still owns its job.
UPDATE {jobs} AS j
SET status = 'cancelled', finished_at = now(), locked_until = NULL,
    last_error = 'cancelled while running',
    attempt_log = {attempt_log_append}(j.attempt_log, jsonb_build_object(
        'attempt', j.attempts, 'worker', j.locked_by, 'started_at', j.locked_at,
        'ended_at', now(), 'outcome', 'cancelled', 'error', 'cancelled while running'))
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[])
     AS c(id, attempts, claim_time)
WHERE j.id = c.id
  AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false)
RETURNING j.id;

-- name: job_progress_write_leased
-- Record the progress of leased jobs (ctx.progress), each only if its claim still owns the job
-- (the token of the outcomes); returns the ids written.  Rows of job_progress (0019).
INSERT INTO {progress} AS p (job_id, attempt, worker, progress, status, updated_at)
SELECT j.id, j.attempts, j.locked_by, r.progress, r.status, now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claim_time_index)s::int[],
            %(progress)s::float8[], %(status)s::text[])
     AS r(id, attempts, claim_time, progress, status)
JOIN {jobs} AS j ON j.id = r.id
WHERE coalesce(j.attempts = r.attempts AND j.status = 'running' AND j.locked_by = %(worker)s
               AND j.locked_at = (%(claim_times)s::timestamptz[])[r.claim_time], false)
ON CONFLICT (job_id) DO UPDATE
SET attempt = excluded.attempt, worker = excluded.worker, progress = excluded.progress,
    status = excluded.status, updated_at = excluded.updated_at
RETURNING p.job_id;

-- name: job_progress_write_held
-- Record the progress of held-lock jobs from a side connection (their rows are locked by the
-- transactions that run them), each only if the session %(pids)s names still runs the job:
-- its row of the job's queue in held_runs is locked by the transaction that updated the job's
-- row (see job_claim), i.e. its claim is alive; returns the ids written.
INSERT INTO {progress} AS p (job_id, attempt, worker, progress, status, updated_at)
SELECT r.id, r.attempts, %(worker)s, r.progress, r.status, now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(pids)s::int[],
            %(progress)s::float8[], %(status)s::text[])
     AS r(id, attempts, pid, progress, status)
WHERE EXISTS (
    SELECT FROM {jobs} AS j
    JOIN {held_runs} AS h ON h.queue = j.queue AND h.pid = r.pid
    WHERE j.id = r.id AND j.status = 'pending' AND h.xmax = j.xmax
      AND {xact_running}(h.xmax))
ON CONFLICT (job_id) DO UPDATE
SET attempt = excluded.attempt, worker = excluded.worker, progress = excluded.progress,
    status = excluded.status, updated_at = excluded.updated_at
RETURNING p.job_id;

-- name: job_progress_get
-- The last progress a job reported (ctx.progress), with its attempt and time; NULL fields when
-- none.  Shown for the job's running attempt by the callers (the row outlives it until pruned).
SELECT progress, status, attempt, worker, updated_at FROM {progress} WHERE job_id = %(id)s;

-- name: job_progress_prune
-- Forget the progress of jobs that no longer run the attempt that reported it (finished,
-- retried, gone): a leased job's row says so; a held-lock job's row looks pending while it
-- runs, so its row is kept while the transaction that runs it holds its session's row of the
-- queue in held_runs (see job_get; a lock only a worker may take).  Rows younger than
-- %(keep_seconds)s are kept (a claim being written).  Run by the maintenance leader.
DELETE FROM {progress} AS p
WHERE p.updated_at < now() - make_interval(secs => %(keep_seconds)s)
  AND NOT EXISTS (SELECT FROM {jobs} AS j
                  WHERE j.id = p.job_id AND j.status = 'running' AND j.attempts = p.attempt)
  AND NOT EXISTS (
      SELECT FROM {jobs} AS j
      JOIN {held_runs} AS h ON h.queue = j.queue AND h.xmax = j.xmax
      WHERE j.id = p.job_id AND j.status = 'pending' AND {xact_running}(h.xmax))
RETURNING p.job_id;
