-- Statements the migrator runs.  {schema} and {migrations} are quoted identifiers.

-- name: migration_begin
-- Begin a caller's transaction (Django's atomic() before its first statement), so that what
-- follows runs in it, in savepoints, not in transactions of psycopg's own that commit alone.
SELECT 1;

-- name: migration_try_lock
-- Serialise migrators of this schema across processes until the transaction ends: tried, never
-- waited for (any login may hold the key, 'skiplock.migrate' and the schema's name: see
-- skiplock._db.migration_lock).
SELECT pg_try_advisory_xact_lock(hashtext(%(advisory_key)s), hashtext(%(schema)s));

-- name: migration_lock_holders
-- The sessions that hold this schema's migration key, as far as this login may see them (any
-- login sees every session's pid, user and application name).
SELECT l.pid, a.usename::text AS usename, a.application_name
FROM pg_locks AS l
LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = hashtext(%(advisory_key)s)::oid AND l.objid = hashtext(%(schema)s)::oid
ORDER BY l.pid;

-- name: migration_lock_timeout
-- How long the migrations' statements wait for a table's lock, for the rest of the
-- transaction; returns the setting it replaces (restored after, in a caller's transaction).
SELECT current_setting('lock_timeout'), set_config('lock_timeout', %(timeout)s, true);

-- name: migration_prepare
-- The schema and the record of applied migrations.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {migrations} (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migration_applied_versions
-- Versions already applied, or none when the record table does not exist yet.
SELECT version FROM {migrations} ORDER BY version;

-- name: migration_record
-- Record one applied migration.
INSERT INTO {migrations} (version, name) VALUES (%(version)s, %(name)s);

-- name: schema_drop
-- Remove the schema with every table and job in it (demo clean-up, tests).
DROP SCHEMA IF EXISTS {schema} CASCADE;
