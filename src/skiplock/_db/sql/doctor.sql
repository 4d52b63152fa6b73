-- Statements of `skiplock doctor` (src/skiplock/_doctor/command.py): read-only looks at the server's
-- statistics and at the schema's tables.  Placeholders as in jobs.sql; each statement is cheap
-- on a large table (index scans with limits, catalog and statistics views).

-- name: doctor_session_visibility
-- Whether this session sees the state and transaction of every other session (superuser or
-- a member of pg_read_all_stats, e.g. through pg_monitor), or only its own.
SELECT coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false)
       OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS sees_all;

-- name: doctor_old_transactions
-- Sessions of this database whose transaction is older than %(older_than)s seconds and holds
-- back the xmin horizon (it has a transaction id or a snapshot), oldest first.
SELECT pid, usename::text AS usename, application_name, state,
       extract(epoch FROM now() - xact_start)::float8 AS xact_seconds,
       extract(epoch FROM now() - state_change)::float8 AS state_seconds,
       age(coalesce(backend_xmin, backend_xid))::bigint AS xmin_age,
       left(regexp_replace(query, '\s+', ' ', 'g'), 120) AS query
FROM pg_stat_activity
WHERE datname = current_database()
  AND backend_type = 'client backend'
  AND pid <> pg_backend_pid()
  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
  AND xact_start < now() - make_interval(secs => %(older_than)s)
ORDER BY xact_start
LIMIT %(limit)s;

-- name: doctor_table_health
-- Live and dead rows, last (auto)vacuum and (auto)analyze, size in bytes (indexes and TOAST
-- included) and storage options of each of the schema's tables (rows come and go in nearly
-- all: the jobs, the held-lock and key-limit bookkeeping, progress, the charts' counts), with
-- the server-wide autovacuum switch.
SELECT s.relname::text AS relname, s.n_live_tup, s.n_dead_tup,
       extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8
           AS vacuum_seconds,
       extract(epoch FROM now() - greatest(s.last_analyze, s.last_autoanalyze))::float8
           AS analyze_seconds,
       pg_total_relation_size(s.relid) AS bytes,
       coalesce(c.reloptions, ARRAY[]::text[]) AS reloptions,
       current_setting('autovacuum') AS autovacuum
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
WHERE s.schemaname = %(schema)s
ORDER BY s.relname;

-- name: doctor_expired_leases
-- Running leased jobs whose lease ran out more than %(grace)s seconds ago: how many, the
-- oldest expiry's age in seconds, and a few of their ids.
SELECT count(*) AS n,
       extract(epoch FROM now() - min(locked_until))::float8 AS oldest_seconds,
       (array_agg(id ORDER BY locked_until))[1:5] AS some_ids
FROM {jobs}
WHERE status = 'running'
  AND locked_until < now() - make_interval(secs => %(grace)s);

-- name: doctor_impossible_states
-- Jobs in states no skiplock statement writes, each counted up to %(cap)s with a few ids:
-- running without a lease (never reclaimed, holding its entity key and a slot of its queue's
-- concurrency limit) and finished without a finish time (never pruned).  Index lookups of
-- NULLs in the partial indexes of running and finished jobs.
SELECT (SELECT count(*) FROM (SELECT 1 FROM {jobs}
                              WHERE status = 'running' AND locked_until IS NULL
                              LIMIT %(cap)s) AS r) AS running_without_lease,
       ARRAY(SELECT id FROM {jobs} WHERE status = 'running' AND locked_until IS NULL
             ORDER BY id LIMIT 5) AS running_ids,
       (SELECT count(*) FROM (SELECT 1 FROM {jobs}
                              WHERE status IN ('done', 'failed', 'cancelled')
                                AND finished_at IS NULL
                              LIMIT %(cap)s) AS f) AS finished_without_time,
       ARRAY(SELECT id FROM {jobs}
             WHERE status IN ('done', 'failed', 'cancelled') AND finished_at IS NULL
             ORDER BY id LIMIT 5) AS finished_ids;

-- name: doctor_queues_without_workers
-- Queues with due jobs that no live worker (one that reported within %(silent)s seconds)
-- claims from: how many due jobs (counted up to %(cap)s in all) and the oldest one's age.
WITH served AS (
    SELECT coalesce(array_agg(DISTINCT q.queue), ARRAY[]::text[]) AS queues
    FROM {workers} AS w, unnest(w.queues) AS q(queue)
    WHERE w.seen_at > now() - make_interval(secs => %(silent)s)
)
SELECT due.queue, count(*) AS n, max(due.age) AS oldest_seconds
FROM (
    SELECT j.queue, extract(epoch FROM now() - j.run_at)::float8 AS age
    FROM {jobs} AS j, served
    WHERE j.status = 'pending' AND j.queue <> ALL(served.queues)
    LIMIT %(cap)s
) AS due
GROUP BY due.queue
ORDER BY due.queue;

-- name: doctor_workers
-- Every worker row: live (reported within %(silent)s seconds) or silent, how long ago it
-- reported, and the jobs still running under its name.
SELECT w.id, w.seen_at > now() - make_interval(secs => %(silent)s) AS live,
       extract(epoch FROM now() - w.seen_at)::float8 AS seen_ago,
       (SELECT count(*) FROM {jobs} AS j
        WHERE j.status = 'running' AND j.locked_by = w.id) AS running
FROM {workers} AS w
ORDER BY w.seen_at DESC;

-- name: doctor_maintenance_leader
-- The worker holding the maintenance role and the seconds until its lease on the role ends
-- (negative: it expired), if any worker ever took it.
SELECT holder, extract(epoch FROM expires_at - now())::float8 AS seconds_left
FROM {leaders}
WHERE role = 'maintenance';

-- name: doctor_job_indexes
-- Every index of the jobs table: name, whether it is valid and ready, its size in bytes, its
-- definition, and the number of pending jobs (counted up to %(cap)s) it should hold.
SELECT ic.relname::text AS name, i.indisvalid AS valid, i.indisready AS ready,
       pg_relation_size(i.indexrelid) AS bytes,
       pg_get_indexdef(i.indexrelid) AS definition,
       (SELECT count(*) FROM (
            SELECT 1 FROM {jobs} WHERE status = 'pending' LIMIT %(cap)s) AS p) AS pending
FROM pg_index AS i
JOIN pg_class AS ic ON ic.oid = i.indexrelid
JOIN pg_class AS tc ON tc.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = tc.relnamespace
WHERE n.nspname = %(schema)s AND tc.relname = 'jobs'
ORDER BY ic.relname;

-- name: doctor_finished_past_retention
-- Per finished status: jobs finished longer ago than its retention plus the grace (counted up
-- to %(cap)s), and the age in seconds of the oldest finished job of that status.
SELECT r.status,
       (SELECT count(*) FROM (
            SELECT 1 FROM {jobs} AS j
            WHERE j.status = r.status
              AND j.finished_at < now() - make_interval(secs => r.older_than + %(grace)s)
            LIMIT %(cap)s) AS x) AS n,
       (SELECT extract(epoch FROM now() - min(j.finished_at))::float8
        FROM {jobs} AS j
        WHERE j.status = r.status AND j.status IN ('done', 'failed', 'cancelled')) AS oldest_seconds
FROM unnest(%(statuses)s::text[], %(older_than)s::float8[]) AS r(status, older_than)
ORDER BY r.status;

-- name: doctor_connections
-- Connection slots: the server's limit, those reserved for superusers, client sessions now,
-- how many of them are skiplock's, and of those the workers' (their pools and listeners, one
-- listener per worker process) and doctor's own.
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved,
       count(*) FILTER (WHERE backend_type = 'client backend') AS in_use,
       count(*) FILTER (WHERE starts_with(application_name, 'skiplock')) AS skiplock_sessions,
       count(*) FILTER (WHERE application_name IN ('skiplock-worker', 'skiplock-listener'))
           AS worker_sessions,
       count(*) FILTER (WHERE application_name = 'skiplock-listener') AS listeners,
       count(*) FILTER (WHERE application_name = 'skiplock-doctor') AS own_sessions
FROM pg_stat_activity;

-- name: doctor_lock_holders
-- The locks of skiplock's that sessions hold (or wait for), one row per lock, by session: an
-- advisory held-lock marker of this schema (kind 'queue marker', of a queue with settings in
-- the queues table: the key of a queue marker does not name its schema, and only a limited
-- queue's count reads it; or 'job marker', with the low 32 bits of the job ids it names) in a session that may not write the jobs table (not a worker: any login can
-- take one), the schema's migration lock (kind 'migration lock', key %(advisory_key)s: a
-- migrator's, or any login's) and rows of the queues table (kind 'queues rows': a limited queue's claim lock),
-- held in a transaction (for the migration lock: a session) older than %(older_than)s seconds.
-- Ages show only for the sessions doctor may see.
SELECT l.pid, a.usename::text AS usename, a.application_name,
       CASE l.classid WHEN hashtext('skiplock_held_job')::oid THEN 'queue marker'
                      ELSE 'job marker' END AS kind,
       CASE WHEN l.classid = hashtext('skiplock_held_job')::oid
            THEN (SELECT min(q.name) FROM {queues} AS q
                  WHERE hashtext(%(schema)s || '/' || q.name)::oid = l.objid) END AS queue,
       CASE WHEN l.classid <> hashtext('skiplock_held_job')::oid
            THEN l.objid::text::bigint END AS low_bits,
       l.mode, l.granted,
       extract(epoch FROM now() - a.xact_start)::float8 AS xact_seconds
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (l.classid = hashtext('skiplock_held_job_id/' || %(schema)s)::oid
       OR l.classid = hashtext('skiplock_held_job')::oid
          AND EXISTS (SELECT FROM {queues} AS q
                      WHERE hashtext(%(schema)s || '/' || q.name)::oid = l.objid))
  AND NOT {may_write_jobs}(a.usesysid)
UNION ALL
SELECT l.pid, a.usename::text, a.application_name, 'migration lock', NULL, NULL, l.mode,
       l.granted, extract(epoch FROM now() - a.xact_start)::float8
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = hashtext(%(advisory_key)s)::oid AND l.objid = hashtext(%(schema)s)::oid
  AND coalesce(a.xact_start, a.backend_start) < now() - make_interval(secs => %(older_than)s)
UNION ALL
SELECT l.pid, a.usename::text, a.application_name, 'queues rows', NULL, NULL, l.mode,
       l.granted, extract(epoch FROM now() - a.xact_start)::float8
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid()
  AND l.relation = to_regclass(quote_ident(%(schema)s) || '.queues')
  AND l.mode IN ('RowShareLock', 'RowExclusiveLock')
  AND a.xact_start < now() - make_interval(secs => %(older_than)s)
ORDER BY 1, 4, 5, 6
LIMIT %(limit)s;
