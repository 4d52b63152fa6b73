-- The history of a job's attempts that ended without success: each failed, retried, snoozed,
-- cancelled or lost attempt (lease expired, worker died) appends one entry to attempt_log,
-- in the statement that records its outcome (no extra write, no extra table): an object of
-- attempt, worker, started_at, ended_at, outcome and error.
-- The last 10 entries are kept, each error cut to 2000 characters, so a row's log stays a few
-- kilobytes whatever a task raises.  A done job's successful attempt is not written: the row
-- already says it (locked_by, locked_at, finished_at), which keeps the hot path of a job that
-- succeeds as it was; an archived job carries it in its log (the archive has no locked_at).
-- The log lives and dies with its row: the jobs' own retention prunes it.  Why a column and
-- not a table of events: docs/design.md, "Attempt history: a capped log on the row".
ALTER TABLE {schema}.jobs ADD COLUMN attempt_log jsonb;
ALTER TABLE {schema}.jobs_archive ADD COLUMN attempt_log jsonb;

-- Append one entry and keep the last 10 (a plain SQL function: inlined in the statements).
CREATE FUNCTION {schema}.attempt_log_append(log jsonb, entry jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT jsonb_path_query_array(coalesce(log, '[]'::jsonb) || jsonb_build_array(entry),
                                  '$[last - 9 to last]')
$$;

-- Bounded like the other columns a producer could write (0015): an array of at most 10
-- entries.  NOT VALID: every row there has none yet.
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_bound_attempt_log CHECK (
    attempt_log IS NULL
    OR CASE WHEN jsonb_typeof(attempt_log) = 'array' THEN jsonb_array_length(attempt_log) <= 10
            ELSE false END
) NOT VALID;
