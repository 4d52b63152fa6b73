-- Least-privilege roles of one skiplock schema, for `skiplock roles` (src/skiplock/roles.py).
-- Not loaded with the runtime statements: besides {schema}, {jobs}, {archive}, {queues},
-- {leaders}, {ticks}, {held_starts}, {workers}, {dependencies}, {jobs_id_seq} and {migrations}
-- these name the roles: {enqueuer}, {worker}, {admin}, {viewer} (and {role} in role_create), all
-- composed as quoted identifiers.

-- name: role_find_existing
-- Which of the given role names exist already in this cluster.
SELECT rolname::text FROM pg_roles WHERE rolname = ANY(%(names)s::text[]);

-- name: role_check_owner
-- Whether the current user may grant on every skiplock table of the schema (a superuser or a
-- member of each table's owner), and how many of those tables exist.
SELECT coalesce(bool_and(pg_has_role(current_user, c.relowner, 'USAGE')), false) AS may_grant,
       count(*) AS tables
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind = 'r'
  AND c.relname IN ('jobs', 'jobs_archive', 'queues', 'leaders', 'periodic_ticks', 'held_starts',
                    'workers', 'job_dependencies', 'migrations');

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
-- (but the status of the jobs a new job depends on, and the last id given out).
GRANT USAGE ON SCHEMA {schema} TO {enqueuer};
GRANT INSERT (queue, task, payload, priority, run_at, max_attempts, entity_key,
              idempotency_key, meta, expires_at, status) ON {jobs} TO {enqueuer};
GRANT SELECT (id, queue, status, idempotency_key) ON {jobs} TO {enqueuer};
GRANT SELECT (id, status) ON {archive} TO {enqueuer};
GRANT INSERT ON {dependencies} TO {enqueuer};
GRANT SELECT ON SEQUENCE {jobs_id_seq} TO {enqueuer};

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
GRANT EXECUTE ON FUNCTION {schema}.entity_key_held(text, text), {schema}.entity_key_hold(text, text)
    TO {worker};
GRANT SELECT ON {migrations} TO {worker};
GRANT SELECT, INSERT, UPDATE, DELETE ON {jobs} TO {worker};
GRANT SELECT, INSERT ON {archive} TO {worker};
GRANT SELECT ON {queues} TO {worker};
GRANT UPDATE (rate_tokens, rate_refilled_at) ON {queues} TO {worker};
GRANT SELECT, INSERT, UPDATE, DELETE ON {leaders}, {ticks}, {held_starts}, {workers},
    {dependencies} TO {worker};
GRANT SELECT ON SEQUENCE {jobs_id_seq} TO {worker};

-- name: role_grant_admin
-- Admin: every row of every skiplock table (retry, cancel, pause, limit, prune, purge), the
-- migration record read-only; still no DDL: migrations run as the schema's owner.
GRANT USAGE ON SCHEMA {schema} TO {admin};
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE
    ON {jobs}, {archive}, {queues}, {leaders}, {ticks}, {held_starts}, {workers},
       {dependencies} TO {admin};
GRANT SELECT ON SEQUENCE {jobs_id_seq} TO {admin};
GRANT SELECT ON {migrations} TO {admin};

-- name: role_grant_viewer
-- Viewer: read jobs, archived jobs, queue settings, workers and the migration record; change
-- nothing (`skiplock status`, `jobs list`, `workers`, the dashboard with --read-only).
GRANT USAGE ON SCHEMA {schema} TO {viewer};
GRANT SELECT ON {jobs}, {archive}, {queues}, {workers}, {dependencies}, {migrations}
    TO {viewer};

-- name: role_grant_monitor
-- Let the admin role see every session's state, so `skiplock doctor` can name the sessions
-- that hold back vacuum (pg_monitor is a built-in role; granting it needs a superuser).
GRANT pg_monitor TO {admin};
