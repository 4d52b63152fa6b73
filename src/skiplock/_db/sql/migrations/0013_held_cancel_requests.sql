-- An admin's request to cancel a held-lock job, kept on the job's start record.  Such a job's
-- row is locked by the transaction it runs in and cannot take the flag a leased job's
-- heartbeat reads, and a NOTIFY reaches only the workers that LISTEN, only while they do.  The
-- request belongs to the version of the job's row it was made on (row_xmin, the version before
-- the running claim): a start from that version reads it, and a write of the row (an outcome,
-- a retry) leaves it behind.  Nullable and without a default: no row is rewritten.
ALTER TABLE {schema}.held_starts ADD COLUMN cancel_requested_at timestamptz;
