-- The definition of the schedule that made each periodic tick (its task, queue, cron or
-- interval, time zone and payload, as JSON text): a worker that starts leading drops the
-- ticks of schedules the app no longer defines, or defines otherwise, and cancels their
-- queued jobs (periodic_reconcile).  NULL for ticks recorded before: kept while the app still
-- defines their name.  Nullable and without a default: no row is rewritten.
ALTER TABLE {schema}.periodic_ticks ADD COLUMN schedule text;
