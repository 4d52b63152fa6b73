"""How a migrator waits for locks other sessions hold (issue 41): pure, no I/O.

Migrators of a schema serialise on an advisory key, ``(hashtext('skiplock.migrate'),
hashtext(<schema>))``, which any login may take.  A migrate with nothing pending takes no lock;
one with work tries the key every :data:`TRY_EVERY` seconds, logs who holds it at once and then
every :data:`LOG_EVERY` seconds, and gives up after ``lock_wait`` seconds
(:class:`~skiplock.errors.MigrationLockBusy`).  Its DDL waits at most ``lock_timeout`` seconds
for a table's lock: a request that waited longer would queue every worker's claim behind it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from skiplock.errors import MigrationLockBusy

log = logging.getLogger("skiplock.migrate")

MIGRATION_KEY = "skiplock.migrate"  # hashed, with the schema's name, into the advisory key
LOCK_WAIT = 120.0  # seconds a migrate waits for another migrator (or a stranger) by default
LOCK_TIMEOUT = 10.0  # seconds a migration's statement waits for a table's lock by default
TRY_EVERY = 0.2
LOG_EVERY = 5.0


def check_wait(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
        raise ValueError(f"{name} must be a number of seconds above 0, at most 86400: {value!r}")
    return float(value)


def describe_holders(holders: Sequence[Mapping[str, Any]]) -> str:
    """The sessions holding the migration key, as far as this session can see them."""
    if not holders:
        return "a session this login cannot see (or one that just let go)"
    return ", ".join(
        f"pid {h['pid']} (user {h['usename'] or '?'}, application "
        f"{h['application_name'] or 'unnamed'!r})"
        for h in holders
    )


class LockWait:
    """The wait of one migrate for the migration key: when to log, when to give up."""

    def __init__(self, schema: str, lock_wait: float) -> None:
        self.schema = schema
        self.lock_wait = lock_wait
        self.started = time.monotonic()
        self.logged_at: float | None = None

    def should_log(self) -> bool:
        now = time.monotonic()
        if self.logged_at is None or now - self.logged_at >= LOG_EVERY:
            self.logged_at = now
            return True
        return False

    def log(self, holders: Sequence[Mapping[str, Any]]) -> None:
        log.warning(
            "skiplock migrate of schema %s waits for the migration lock, held by %s "
            "(for %.0f s so far, at most %.0f s)",
            self.schema,
            describe_holders(holders),
            time.monotonic() - self.started,
            self.lock_wait,
        )

    def expired(self) -> bool:
        return time.monotonic() - self.started >= self.lock_wait

    def busy(self, holders: Sequence[Mapping[str, Any]]) -> MigrationLockBusy:
        return MigrationLockBusy(
            f"schema {self.schema!r}: no migration applied: the migration lock "
            f"(pg_advisory_lock(hashtext('skiplock.migrate'), hashtext({self.schema!r}))) was "
            f"held for {self.lock_wait:g} s by {describe_holders(holders)}. Another "
            "`skiplock migrate` may still be running: run it again once it ends, or wait longer "
            "(--lock-wait, or migrate(lock_wait=...)); a session that is no migrator can be "
            "ended with SELECT pg_terminate_backend(pid)"
        )


def ddl_timed_out(schema: str, version: int, lock_timeout: float, exc: Exception) -> Exception:
    """The error of a migration whose statement waited ``lock_timeout`` for a table's lock."""
    return MigrationLockBusy(
        f"schema {schema!r}: migration {version:04d} was rolled back, nothing applied: it "
        f"waited lock_timeout={lock_timeout:g} s for a lock on one of skiplock's tables that "
        f"another session holds ({str(exc).strip().splitlines()[0]}): a long transaction on "
        "the jobs table, such as a held-lock job's, or a LOCK TABLE. Run it again when that "
        "session's transaction has ended (pg_locks and pg_stat_activity name it), or wait "
        "longer (--lock-timeout, or migrate(lock_timeout=...)); every claim queues behind a "
        "migration's waiting lock meanwhile"
    )
