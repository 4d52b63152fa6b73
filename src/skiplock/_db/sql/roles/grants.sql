-- Least-privilege roles of one skiplock schema, for `skiplock roles` (src/skiplock/_cli/roles.py).
-- Not loaded with the runtime statements: besides {schema}, {jobs}, {archive}, {queues},
-- {leaders}, {ticks}, {held_starts}, {held_key_slots}, {held_runs}, {held_key_runs}, {progress}, {workers}, {dependencies}, {jobs_id_seq},
-- {finished_counts} and {migrations}
-- these name the roles: {enqueuer}, {worker}, {admin}, {viewer} (and {role} in role_create), all
-- composed as quoted identifiers.

-- name: role_find_existing
-- Which of the given role names exist already in this cluster.
SELECT rolname::text FROM pg_roles WHERE rolname = ANY(%(names)s::text[]);

-- name: role_find_other_databases
-- Of the given roles, those that hold a privilege in, own or are named by an object of
-- another database of this cluster, with that database (the shared catalog pg_shdepend
-- records each such reference).
SELECT r.rolname::text AS role, d.datname::text AS database
FROM pg_shdepend AS s
JOIN pg_roles AS r ON r.oid = s.refobjid
JOIN pg_database AS d ON d.oid = s.dbid
WHERE s.refclassid = 'pg_authid'::regclass AND r.rolname::text = ANY(%(names)s::text[])
  AND d.datname <> current_database()
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: role_refuse_other_databases
-- The printed script's guard: an error, which aborts its transaction, when one of the roles
-- has privileges in another database (as role_find_other_databases).  Role names are
-- cluster-wide: the members of another database's roles would reach this database's jobs.
-- Plain SQL: the message is the text of a failed cast.
SELECT ('role ' || u.role || ' already has privileges in database ' || u.db
        || ': roles are cluster-wide, give this database''s roles names of their own')::int
FROM (SELECT r.rolname::text AS role, d.datname::text AS db
      FROM pg_shdepend AS s
      JOIN pg_roles AS r ON r.oid = s.refobjid
      JOIN pg_database AS d ON d.oid = s.dbid
      WHERE s.refclassid = 'pg_authid'::regclass
        AND r.rolname::text = ANY({names}::text[])
        AND d.datname <> current_database()
      ORDER BY 1, 2
      LIMIT 1) AS u;

-- name: role_lock_timeout
-- Give up on a table lock after %(ms)s ms: turning row-level security on and replacing the
-- policies lock the jobs table exclusively, and a queue of statements waits behind a lock
-- waiting for a long (held-lock) job's transaction.
SELECT set_config('lock_timeout', %(ms)s::text, true);

-- name: role_check_owner
-- Whether the current user may grant on every skiplock table of the schema (a superuser or a
-- member of each table's owner), and how many of those tables exist.
SELECT coalesce(bool_and(pg_has_role(current_user, c.relowner, 'USAGE')), false) AS may_grant,
       count(*) AS tables
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p')
  AND c.relname IN ('jobs', 'jobs_archive', 'queues', 'leaders', 'periodic_ticks', 'held_starts',
                    'held_key_slots', 'held_runs', 'held_key_runs', 'workers', 'job_dependencies', 'job_progress', 'migrations',
                    'finished_counts');

-- name: role_create
-- One role without login rights; give it to login users with GRANT role TO user.
CREATE ROLE {role} NOLOGIN;

-- name: role_revoke_all
-- Start from nothing, so re-running the grants leaves exactly what they list (revoking a
-- table's privileges revokes its column privileges too).
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {enqueuer}, {worker}, {admin}, {viewer};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM {enqueuer}, {worker}, {admin}, {viewer};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {schema} FROM {enqueuer}, {worker}, {admin}, {viewer};
REVOKE ALL ON SCHEMA {schema} FROM {enqueuer}, {worker}, {admin}, {viewer};

-- name: role_grant_enqueuer
-- Enqueuer: insert jobs, only the columns enqueue writes, and read back only what the insert
-- returns and the idempotency-key lookup needs: never payloads, errors or other jobs' state
-- (but the status of the jobs a new job depends on, and the last id given out).  Its rows
-- must be claimable: waiting, scheduled or pending, unclaimed (a row-level security policy,
-- restrictive, so it narrows what the grants allow and only for the enqueuer: every other role
-- passes the permissive policy that lets any row through, as without row-level security; the
-- table's owner skips both).  The restrictive policy is named after the role: the enqueuer
-- roles of several apps on one schema keep one each.  Its dependencies go only to the jobs it
-- inserts (the trigger of migration 0014 checks every write to job_dependencies).
GRANT USAGE ON SCHEMA {schema} TO {enqueuer};
GRANT INSERT (queue, task, payload, priority, run_at, max_attempts, entity_key,
              idempotency_key, meta, expires_at, fair_key, limit_key, status) ON {jobs} TO {enqueuer};
-- fair_key_turn: called by the enqueue of versions before migration 0027, which gives a
-- fair_key's turn by a trigger; it returns nothing now and reads nothing.
GRANT EXECUTE ON FUNCTION {schema}.fair_key_turn(text, int, text) TO {enqueuer};
GRANT SELECT (id, queue, status, idempotency_key) ON {jobs} TO {enqueuer};
GRANT SELECT (id, status) ON {archive} TO {enqueuer};
GRANT INSERT ON {dependencies} TO {enqueuer};
GRANT SELECT ON SEQUENCE {jobs_id_seq} TO {enqueuer};
ALTER TABLE {jobs} ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS skiplock_any_row ON {jobs};
CREATE POLICY skiplock_any_row ON {jobs} USING (true) WITH CHECK (true);
DROP POLICY IF EXISTS {enqueuer} ON {jobs};
CREATE POLICY {enqueuer} ON {jobs} AS RESTRICTIVE FOR INSERT TO {enqueuer}
    WITH CHECK (status IN ('waiting', 'scheduled', 'pending') AND attempts = 0
                AND locked_by IS NULL AND locked_at IS NULL AND locked_until IS NULL
                AND finished_at IS NULL AND last_error IS NULL AND NOT cancel_requested);

-- name: role_grant_worker
-- Worker: claim, heartbeat, finish, fail, reclaim, promote, prune and periodic ticks on jobs;
-- archive finished jobs; read queue settings; hold the maintenance leadership; record the
-- starts of held-lock jobs; spend the rate budget of rate-limited queues; report itself in
-- the workers table; release jobs waiting for others.  No DDL, no CREATE
-- on the schema, no TRUNCATE, and queue settings are read-only.  The claims call the
-- entity-key check (PostgreSQL lets everyone execute functions unless a DBA revoked that); a
-- worker reads the migration record at start, to refuse a schema older than itself.
GRANT USAGE ON SCHEMA {schema} TO {worker};
GRANT EXECUTE ON FUNCTION {schema}.entity_key_running(text) TO {worker};
GRANT EXECUTE ON FUNCTION {schema}.entity_key_held(text, text), {schema}.entity_key_hold(text, text),
    {schema}.entity_key_locked_by_worker(text, text), {schema}.may_write_jobs(oid)
    TO {worker};
GRANT EXECUTE ON FUNCTION {schema}.attempt_log_append(jsonb, jsonb) TO {worker};  -- outcomes (0018)
GRANT EXECUTE ON FUNCTION {schema}.fair_key_turn(text, int, text) TO {worker};  -- enqueue before 0027
GRANT EXECUTE ON FUNCTION {schema}.key_limited(text) TO {worker};  -- claims (0021)
GRANT SELECT ON {key_limits} TO {worker};
GRANT UPDATE (rate_tokens, rate_refilled_at) ON {key_limits} TO {worker};
GRANT SELECT ON {migrations} TO {worker};
GRANT SELECT, INSERT, UPDATE, DELETE ON {jobs} TO {worker};
GRANT SELECT, INSERT, DELETE ON {archive} TO {worker};  -- DELETE: the archive's retention (0022)
GRANT EXECUTE ON FUNCTION {schema}.archive_partitions_keep(int, float8, timestamptz)
    TO {worker};  -- a partitioned archive's days (0022)
GRANT SELECT ON {queues} TO {worker};
GRANT UPDATE (rate_tokens, rate_refilled_at) ON {queues} TO {worker};
GRANT SELECT, INSERT, UPDATE, DELETE ON {leaders}, {ticks}, {held_starts}, {workers},
    {dependencies} TO {worker};
GRANT SELECT ON SEQUENCE {jobs_id_seq} TO {worker};
GRANT SELECT, INSERT, UPDATE, DELETE ON {progress} TO {worker};  -- ctx.progress (0019)
-- The slots of held-lock jobs' entity keys: read by every claim, locked by a held-lock claim
-- (a row lock needs UPDATE; no role but the worker may take one, which makes the mark a
-- worker's: migration 0020).
GRANT SELECT, UPDATE ON {held_key_slots} TO {worker};
-- The rows of held-lock workers' sessions: registered, locked by a held-lock claim for as long
-- as its job runs, read by the counts (a row lock needs UPDATE: migration 0024).
GRANT SELECT, INSERT, UPDATE, DELETE ON {held_runs} TO {worker};
GRANT EXECUTE ON FUNCTION {schema}.xact_running(xid), {schema}.held_run_mark(text) TO {worker};
-- The slots of limited keys' running held-lock jobs: locked by a held-lock claim of such a job
-- for as long as it runs, read by the claims of limited keys (0028).
GRANT SELECT, UPDATE ON {held_key_runs} TO {worker};
-- The charts' counts of jobs that leave the table (0025): written by the outcomes of
-- completion="delete" and "archive" and by pruning, pruned by the maintenance leader.
GRANT SELECT, INSERT, DELETE ON {finished_counts} TO {worker};
GRANT EXECUTE ON FUNCTION {schema}.finished_wait_bucket(float8) TO {worker};
-- The one INSERT of those counts (0026), run with the caller's rights.
GRANT EXECUTE ON FUNCTION {schema}.finished_counts_add(timestamptz[], text[], text[], float8[])
    TO {worker};

-- name: role_grant_admin
-- Admin: every row of every skiplock table (retry, cancel, pause, limit, prune, purge), the
-- migration record read-only; still no DDL: migrations run as the schema's owner.
GRANT USAGE ON SCHEMA {schema} TO {admin};
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE
    ON {jobs}, {archive}, {queues}, {leaders}, {ticks}, {held_starts}, {workers},
       {dependencies} TO {admin};
GRANT SELECT ON SEQUENCE {jobs_id_seq} TO {admin};
GRANT SELECT, DELETE ON {progress} TO {admin};
GRANT SELECT ON {migrations} TO {admin};
GRANT EXECUTE ON FUNCTION {schema}.may_write_jobs(oid) TO {admin};  -- doctor: which sessions are workers
GRANT SELECT ON {held_runs} TO {admin};  -- running held-lock jobs shown running (0024)
GRANT EXECUTE ON FUNCTION {schema}.xact_running(xid) TO {admin};
GRANT EXECUTE ON FUNCTION {schema}.fair_key_turn(text, int, text) TO {admin};  -- enqueue before 0027
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON {key_limits} TO {admin};  -- limits per key (0021)
GRANT SELECT, INSERT, DELETE ON {held_key_runs} TO {admin};  -- a key's held-lock slots (0028)
GRANT EXECUTE ON FUNCTION {schema}.archive_partitions_keep(int, float8, timestamptz)
    TO {admin};  -- skiplock prune (0022)
GRANT SELECT, INSERT, DELETE, TRUNCATE ON {finished_counts} TO {admin};  -- charts, bulk delete (0025)
GRANT EXECUTE ON FUNCTION {schema}.finished_wait_bucket(float8) TO {admin};
GRANT EXECUTE ON FUNCTION {schema}.finished_counts_add(timestamptz[], text[], text[], float8[])
    TO {admin};  -- the bulk delete and pruning count what they delete (0026)

-- name: role_grant_viewer
-- Viewer: read jobs, archived jobs, queue settings, workers and the migration record; change
-- nothing (`skiplock status`, `jobs list`, `workers`, the dashboard with --read-only).
GRANT USAGE ON SCHEMA {schema} TO {viewer};
GRANT SELECT ON {jobs}, {archive}, {queues}, {workers}, {dependencies}, {migrations}
    TO {viewer};
GRANT EXECUTE ON FUNCTION {schema}.may_write_jobs(oid) TO {viewer};
GRANT SELECT ON {held_runs} TO {viewer};  -- held-lock jobs shown running (0024)
GRANT EXECUTE ON FUNCTION {schema}.xact_running(xid) TO {viewer};
GRANT SELECT ON {progress} TO {viewer};
GRANT SELECT ON {key_limits} TO {viewer};
GRANT SELECT ON {held_key_runs} TO {viewer};
GRANT SELECT ON {finished_counts} TO {viewer};  -- the dashboard's charts (0025)
GRANT EXECUTE ON FUNCTION {schema}.finished_wait_bucket(float8) TO {viewer};

-- name: role_grant_monitor
-- Let the admin role see every session's state, so `skiplock doctor` can name the sessions
-- that hold back vacuum (pg_monitor is a built-in role; granting it needs a superuser).
GRANT pg_monitor TO {admin};
