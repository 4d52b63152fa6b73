-- The archive's upkeep: its retention (the maintenance leader, `skiplock prune`), its daily
-- partitions (opt-in, `skiplock archive partition`) and a look at its health (`skiplock
-- archive`, `skiplock doctor`).  Placeholders as in jobs.sql; %(now)s, where a statement
-- takes it, pins the clock (NULL: the server's now()).  Why and how: docs/design.md, "An
-- archive that stays healthy".

-- name: job_archive_prune
-- Delete up to %(limit)s archived jobs finished more than %(older_than)s seconds before now,
-- oldest first (an index range scan of jobs_archive_finished_idx): one short transaction a
-- batch.  Waits at most 2 s on a lock, as periodic_prune_ticks.
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
DELETE FROM {archive} WHERE id IN (
    SELECT a.id FROM {archive} AS a, wait
    WHERE a.finished_at < coalesce(%(now)s::timestamptz, now())
                          - make_interval(secs => %(older_than)s)
    ORDER BY a.finished_at
    LIMIT %(limit)s
)
RETURNING id;

-- name: archive_partitions_keep
-- A partitioned archive: create the daily partitions of the next %(ahead)s days and drop
-- those past the retention (%(older_than)s seconds; NULL keeps them).  Whether the archive is
-- partitioned, and the partitions created and dropped (see migration 0022).
SELECT partitioned, created, dropped
FROM {schema}.archive_partitions_keep(%(ahead)s, %(older_than)s::float8,
                                      coalesce(%(now)s::timestamptz, now()));

-- name: archive_health
-- The archive at a glance, from the catalog and its index (no count of its rows): whether it
-- is partitioned, its rows as the statistics estimate them, its size in bytes, the age in
-- seconds of its oldest job, its partitions, how far ahead of now the last one reaches, and the
-- rows in its default partition (there only when no daily partition was made for them).
WITH parent AS (
    SELECT c.oid, c.relkind = 'p' AS partitioned
    FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname = 'jobs_archive'
), parts AS (
    SELECT c.oid, c.relname::text AS relname, c.reltuples,
           pg_get_expr(c.relpartbound, c.oid) AS bound
    FROM parent JOIN pg_inherits AS i ON i.inhparent = parent.oid
    JOIN pg_class AS c ON c.oid = i.inhrelid
)
SELECT parent.partitioned,
       (SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint
        FROM pg_class AS c
        WHERE c.oid = parent.oid OR c.oid IN (SELECT oid FROM parts)) AS rows_estimate,
       (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
        FROM pg_class AS c
        WHERE c.oid = parent.oid OR c.oid IN (SELECT oid FROM parts)) AS bytes,
       (SELECT extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - min(a.finished_at))
        FROM {archive} AS a)::float8 AS oldest_seconds,
       (SELECT count(*) FROM parts WHERE bound <> 'DEFAULT') AS partitions,
       (SELECT extract(epoch FROM max(substring(bound FROM 'TO \(''([^'']+)''\)')::timestamptz)
                                  - coalesce(%(now)s::timestamptz, now()))
        FROM parts)::float8 AS ahead_seconds,
       (SELECT coalesce(sum(s.n_live_tup), 0)
        FROM parts JOIN pg_stat_user_tables AS s ON s.relid = parts.oid
        WHERE parts.bound = 'DEFAULT')::bigint AS default_rows
FROM parent;

-- name: archive_partition_bound
-- Partitioning the archive, first step: a constraint that every row finished before the
-- cutoff (the end of a UTC day at least a day away, so that jobs archived meanwhile pass it),
-- not yet validated: a brief lock.  Waits at most 2 s for it.
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
SELECT {schema}.archive_partition_bound(coalesce(
           %(cutoff)s::timestamptz,
           (date_trunc('day', now() AT TIME ZONE 'UTC') + interval '2 days') AT TIME ZONE 'UTC'))
FROM wait;

-- name: archive_partition_validate
-- Second step: validate that constraint, a scan of the archive that lets jobs be archived
-- meanwhile (SHARE UPDATE EXCLUSIVE).
ALTER TABLE {archive} VALIDATE CONSTRAINT jobs_archive_legacy_bound;

-- name: archive_partition_swap
-- Last step: the plain archive becomes the partition of everything before the cutoff, under
-- a new partitioned archive (see migration 0022).  Waits at most 2 s for its lock.
WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', '2s', true) AS setting)
SELECT {schema}.archive_partition_swap(%(cutoff)s::timestamptz, %(ahead)s) FROM wait;
