-- Statements the migrator runs.  {schema} and {migrations} are quoted identifiers.

-- name: migration_lock
-- Serialise migrators of this schema across processes until the transaction ends.
SELECT pg_advisory_xact_lock(hashtext('skiplock.migrate'), hashtext(%(schema)s));

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
