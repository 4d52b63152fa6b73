-- The bounds of what enqueue accepts (skiplock/_db/payload.py), as CHECK constraints on jobs, so
-- that no producer, skiplock or not, inserts a row a worker or an admin surface cannot handle:
-- names as enqueue spells them; keys of 1-512 characters (a claim indexes a running job's
-- entity key); run_at and expires_at within 0001-01-02 .. 9999-12-30 UTC (Python's datetime,
-- in any time zone); payload and meta nested at most 64 levels, integers of at most 4300
-- digits (what json.loads decodes).  docs/security.md has the table of limits.
--
-- They bind the rows a worker may claim (waiting, scheduled, pending): every row gets there
-- by an insert or a retry, both checked, while a claim or an outcome (to running, done, ...)
-- is not checked again, which keeps the jsonpath walks off the hot path.
--
-- Added NOT VALID: the migration never fails on rows already there, and new rows are checked.
-- The unfinished rows that break a bound are failed first (running ones too: a retry or a
-- lease reclaim would make them claimable, and the constraint would refuse that write), and the
-- failed or cancelled ones are marked, their last_error starting with 'InvalidPayload: this job
-- breaks the bound <name>' (a bulk retry passes them over, see job_retry_many).
-- jobs_archive gets none: its rows come from jobs, finished.
DO $migration$
DECLARE
    bound record;
BEGIN
    FOR bound IN
        SELECT * FROM (VALUES
            -- (a length and an unbounded pattern: a bounded repeat such as {{0,199}} makes
            -- PostgreSQL's regex far slower)
            ('jobs_bound_queue',
             $b$char_length(queue) <= 63 AND queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$'$b$),
            ('jobs_bound_task',
             $b$char_length(task) <= 200 AND task ~ '^[A-Za-z_][A-Za-z0-9_.:-]*$'$b$),
            ('jobs_bound_entity_key', $b$char_length(entity_key) BETWEEN 1 AND 512$b$),
            ('jobs_bound_idempotency_key', $b$char_length(idempotency_key) BETWEEN 1 AND 512$b$),
            ('jobs_bound_run_at',
             $b$run_at BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00'$b$),
            ('jobs_bound_expires_at',
             $b$expires_at BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00'$b$),
            ('jobs_bound_payload', $b$NOT jsonb_path_exists(payload,
                'strict $.**{{64}} ? (@.type() == "object" || @.type() == "array")')
                AND NOT jsonb_path_exists(payload,
                'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))')$b$),
            ('jobs_bound_meta', $b$NOT jsonb_path_exists(meta,
                'strict $.**{{64}} ? (@.type() == "object" || @.type() == "array")')
                AND NOT jsonb_path_exists(meta,
                'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))')$b$)
        ) AS bounds (name, expression)
    LOOP
        EXECUTE format(
            'UPDATE {schema}.jobs SET '
            'finished_at = CASE WHEN status = ''failed'' OR status = ''cancelled'' '
            '    THEN finished_at ELSE now() END, '
            'status = CASE WHEN status = ''cancelled'' THEN status ELSE ''failed'' END, '
            'locked_by = NULL, locked_at = NULL, locked_until = NULL, '
            'last_error = %L || coalesce(E''\n\n'' || last_error, '''') '
            'WHERE status IN (''waiting'', ''scheduled'', ''pending'', ''running'', ''failed'', '
            '''cancelled'') '
            'AND coalesce(last_error, '''') NOT LIKE ''InvalidPayload: this job breaks the bound %%'' '
            'AND NOT (%s)',
            'InvalidPayload: this job breaks the bound ' || bound.name || ', added by '
                || 'migration 15: no worker could run it (see docs/security.md)',
            bound.expression
        );
        EXECUTE format(
            'ALTER TABLE {schema}.jobs ADD CONSTRAINT %I '
            'CHECK (status NOT IN (''waiting'', ''scheduled'', ''pending'') OR (%s)) NOT VALID',
            bound.name, bound.expression
        );
    END LOOP;
END
$migration$;
