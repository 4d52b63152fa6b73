-- The claim's time joins its ownership token: every write that names a claim checks
-- locked_by, attempts and locked_at.  A worker and attempt can repeat (a leased claim the
-- server forgot in a crash, its attempt with it; a job given back unstarted, its attempt
-- unspent); the time of a new claim cannot.  Every claim already stamps locked_at, so no row
-- changes: this records what the columns mean now.
COMMENT ON COLUMN {schema}.jobs.attempts IS 'claims so far; with locked_by and locked_at it is the ownership token of the current claim';
COMMENT ON COLUMN {schema}.jobs.locked_at IS 'when the current claim was made (the claim statement''s now()); part of its ownership token';
