-- A fair_key's turn is given by a trigger on the jobs table, not by a function the producer's
-- statement calls (issue 41): fair_key_turn was SECURITY DEFINER and executable by the
-- enqueuer role, so called directly it told whether other keys had pending jobs and when they
-- were due, which that role may not read.  The trigger function reads with its owner's rights
-- too, but only a trigger can call it, and only the table's owner can attach it (no one may
-- execute it: not even to attach it to a temporary table of their own).
--
-- The turn is the one of migration 0021: the run_at of the oldest keyed pending job of the
-- row's queue and priority, or one microsecond after the latest pending job of its key,
-- whichever is later; the row keeps its run_at when the queue and priority have no keyed
-- pending job.  VOLATILE: each row sees the rows its statement inserted before it, so the jobs
-- of one statement take their key's turns one after another (docs/design.md, "Fair shares: a
-- fair_key's turn").  Only a due row (pending) with a key fires it.
CREATE FUNCTION {schema}.fair_key_take_turn() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head timestamptz;
    last timestamptz;
BEGIN
    SELECT run_at INTO head FROM {schema}.jobs
    WHERE status = 'pending' AND fair_key IS NOT NULL AND queue = NEW.queue
      AND priority = NEW.priority
    ORDER BY run_at LIMIT 1;
    IF head IS NOT NULL THEN
        SELECT run_at INTO last FROM {schema}.jobs
        WHERE status = 'pending' AND fair_key IS NOT NULL AND queue = NEW.queue
          AND priority = NEW.priority AND fair_key = NEW.fair_key
        ORDER BY run_at DESC LIMIT 1;
        NEW.run_at := greatest(head, last + interval '1 microsecond');
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION {schema}.fair_key_take_turn() FROM PUBLIC;
CREATE TRIGGER jobs_fair_key_turn BEFORE INSERT ON {schema}.jobs
    FOR EACH ROW WHEN (NEW.fair_key IS NOT NULL AND NEW.status = 'pending')
    EXECUTE FUNCTION {schema}.fair_key_take_turn();

-- Kept for the statements of the previous version during an upgrade, which call it: it tells
-- nothing now (their rows take their turn from the trigger).  Reads nothing, so no rights.
CREATE OR REPLACE FUNCTION {schema}.fair_key_turn(q text, p int, k text) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE SECURITY INVOKER SET search_path = pg_catalog, pg_temp
AS $$ SELECT NULL::timestamptz $$;
