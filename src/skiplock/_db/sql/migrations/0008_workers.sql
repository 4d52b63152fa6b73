-- The workers that are running: each reports itself every few seconds (presence.py) and
-- removes its row when it stops; the row of a worker that was killed stops being renewed and
-- the maintenance leader deletes it after an hour.  For people and tools (`skiplock workers`,
-- the dashboard): no claim, finish or other state change reads it.
CREATE TABLE {schema}.workers (
    id          text        PRIMARY KEY,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    queues      text[]      NOT NULL,
    concurrency integer     NOT NULL,
    model       text        NOT NULL,
    version     text        NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    running     integer     NOT NULL DEFAULT 0,
    finished    bigint      NOT NULL DEFAULT 0
);
