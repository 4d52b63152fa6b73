-- A rate limit per queue: at most rate_limit job starts per rate_period seconds across all
-- workers, as a bucket of rate_limit starts refilled continuously (rate_tokens, as of
-- rate_refilled_at; NULL: full).  Nullable and without defaults: adding them rewrites no rows.
ALTER TABLE {schema}.queues
    ADD COLUMN rate_limit integer CHECK (rate_limit IS NULL OR rate_limit > 0),
    ADD COLUMN rate_period float8 CHECK (rate_period IS NULL OR rate_period > 0),
    ADD COLUMN rate_tokens float8,
    ADD COLUMN rate_refilled_at timestamptz,
    ADD CONSTRAINT queues_rate_limit_has_a_period
        CHECK ((rate_limit IS NULL) = (rate_period IS NULL));
