"""The exceptions skiplock raises, and the ones a task raises to steer its own job.

Every error skiplock raises on bad input or a database problem is a :class:`SkiplockError`
whose message names the problem and the fix.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from difflib import get_close_matches

NAME_SHOWN = 100  # characters of an unknown task's name in its error
KNOWN_SHOWN = 3  # registered task names an UnknownTask error names at most


class SkiplockError(Exception):
    """Base class of every error skiplock raises."""


class ConfigurationError(SkiplockError):
    """skiplock is not set up right: no database given, a malformed DSN, a bad option."""


class DatabaseUnavailable(SkiplockError):
    """PostgreSQL could not be reached or refused the connection."""


class NoConnectionSlot(DatabaseUnavailable):
    """PostgreSQL refused a new session for want of a free slot: ``max_connections`` (less the
    ones reserved for superusers) are all in use, or a role's or database's connection limit is
    reached.  It passes once other sessions end; a worker waits for it (with backoff) instead of
    exiting."""


class QueueLockBusy(SkiplockError):
    """A claim of a queue with a concurrency or rate limit could not go ahead: another session
    held the queue's claim lock (its row of the ``queues`` table) past the claim's lock
    timeout.  Only that queue's claim is skipped."""

    def __init__(
        self, queue: str, reason: str = "another session holds its row of the queues table locked"
    ) -> None:
        super().__init__(
            f"queue {queue!r}: claims skipped, {reason}; they resume when that session's "
            f"transaction ends (`skiplock doctor` names the session)"
        )
        self.queue = queue


class MigrationLockBusy(SkiplockError):
    """A migration could not go ahead for a lock another session held: the schema's migration
    lock past ``lock_wait`` seconds (another migrator, or any login that took the advisory key),
    or a lock on a table a migration changes past ``lock_timeout``.  Nothing was applied."""


class SchemaNotMigrated(SkiplockError):
    """The skiplock tables do not exist in this schema yet, or lack migrations that this
    version of skiplock needs (``missing``, or what the server said was missing)."""

    def __init__(self, schema: str, missing: Sequence[int] = (), detail: str = "") -> None:
        if missing:
            versions = ", ".join(f"{v:04d}" for v in missing)
            what = f"schema {schema!r} lacks skiplock migrations this version needs ({versions})"
        elif detail:
            what = f"schema {schema!r} lacks a skiplock migration this version needs ({detail})"
        else:
            what = f"skiplock's tables are missing from schema {schema!r}"
        fix = f"run `skiplock migrate --schema {schema}` (or App.migrate()) first"
        super().__init__(f"{what}: {fix}")
        self.schema = schema
        self.missing: list[int] = list(missing)


class UnknownTask(SkiplockError):
    """No task of that name is registered with the app."""

    def __init__(self, name: str, known: Collection[str]) -> None:
        # Stored as the job's last_error and logged: name at most a few registered tasks (the
        # closest, else the first), and not all of a name too long to read.
        shown = repr(name if len(name) <= NAME_SHOWN else name[:NAME_SHOWN] + "...")
        if not known:
            registered = "no task is registered"
        else:
            count = f"{len(known)} task{'s' if len(known) != 1 else ''} registered"
            closest = get_close_matches(name, known, n=KNOWN_SHOWN)
            some = closest or sorted(known)[:KNOWN_SHOWN]
            more = ", ..." if not closest and len(known) > KNOWN_SHOWN else ""
            registered = f"{count}, {'closest:' if closest else 'e.g.'} {', '.join(some)}{more}"
        if name.startswith("__main__."):
            # Enqueued by a script run directly: its module was '__main__' there, and no worker
            # can import a module of that name.
            fix = (
                "it was enqueued by a script run directly (python file.py), whose module is "
                "named __main__ there: give the task a name, @app.task(name=...), so that the "
                "script and the worker agree"
            )
        else:
            fix = f"register it with @app.task(name={shown}) in the module the worker imports"
        super().__init__(f"unknown task {shown}: {fix} ({registered})")
        self.name = name


class InvalidPayload(SkiplockError):
    """A job payload that cannot be stored: not JSON-serialisable, or too large."""


class InvalidArguments(SkiplockError, TypeError):
    """An enqueue whose arguments the task cannot take (an unknown or missing argument): refused
    at once, as the worker's call of the task would fail on every attempt."""


class InvalidName(SkiplockError):
    """A queue, task or schema name skiplock does not accept."""


class IdempotencyConflict(SkiplockError):
    """A failed or cancelled job cannot be retried: an unfinished job holds its idempotency key
    (two unfinished jobs never share one)."""

    def __init__(self, job_id: int, key: str, holder_id: int) -> None:
        super().__init__(
            f"job {job_id} cannot be retried: unfinished job {holder_id} holds its idempotency "
            f"key {key!r}; wait for that job to finish, or cancel it, then retry"
        )
        self.job_id = job_id
        self.key = key
        self.holder_id = holder_id


class Retry(Exception):
    """Raise in a task to run the job again after ``delay`` seconds without spending an attempt."""

    def __init__(self, delay: float = 0.0, reason: str = "") -> None:
        if delay < 0:
            raise ValueError("Retry delay must be >= 0 seconds")
        super().__init__(reason or f"retry requested in {delay:g}s")
        self.delay = delay


class Fail(Exception):
    """Raise in a task to fail its job for good now, whatever attempts it has left.

    The job ends ``failed`` with this error (and the exception it was raised ``from``, if any)
    recorded like any other; an admin can still retry it.  For errors that another attempt
    cannot fix: the record it needs is gone, the input is invalid.
    """


class JobTimeout(Exception):
    """The task ran longer than its ``timeout``; retried like any other failure (list it in
    ``retry_on`` when that is given, to keep retrying timeouts)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the task ran longer than its timeout of {seconds:g}s and was stopped")
        self.seconds = seconds
