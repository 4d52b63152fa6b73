"""Where the database comes from, and how connection problems are reported.

The DSN is, in order: the one passed in (``App(dsn=...)`` or ``--dsn``), then
``SKIPLOCK_DATABASE_URL``, then ``DATABASE_URL``, then the embedded server when the
``embedded`` extra is installed.  Otherwise a :class:`ConfigurationError` names both ways.

Prepared statements: psycopg prepares a statement on a connection once it ran there a few
times, and skiplock's small claims count on it (one plan per connection).  A transaction-mode
pooler that does not track prepared statements (PgBouncer before 1.21, or with
``max_prepared_statements = 0``) hands each transaction any server connection, where the
statement is missing or already taken: such a setup turns them off (``App(prepared_statements=
False)`` or ``SKIPLOCK_PREPARED_STATEMENTS=off``), and the errors it would otherwise get are
translated into one that says so (:func:`translate`).

Dead connections: a connection whose server went away without a word (a failover that moved
its address, a firewall or NAT that forgot it, a host that lost power) gets no reset, so a
worker would wait on it for as long as the kernel lets it: a statement ~15 minutes of
retransmissions, an idle or listening connection forever; and the server would keep the
session, its transaction and its row locks for over two hours.  skiplock's own TCP connections
therefore give up after ~10 s without an acknowledgement (TCP keepalives and
``tcp_user_timeout``, see :data:`DEAD_PEER_PARAMS`), and their sessions ask the server to do
the same (:func:`server_watch_settings`).  A setting the DSN names keeps its value, at both
ends (``keepalives=0`` turns the probes off, ``tcp_user_timeout=0`` the timeout).

Connection slots: how many sessions a worker process and a client open at most
(:func:`worker_connections`, :data:`CLIENT_POOL_MAX`) is defined here, for the worker, the
client and ``skiplock doctor``'s headroom figure to agree; a server out of slots is told apart
(:func:`no_slot`) so that a worker waits for one rather than exits.
"""

from __future__ import annotations

import os
import re
from functools import cache
from typing import Any

import psycopg
from psycopg import conninfo, pq

from skiplock._db import embedded
from skiplock._db.bounds import TABLE_BOUNDS
from skiplock.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    InvalidPayload,
    NoConnectionSlot,
    SchemaNotMigrated,
)

ENV_VARS = ("SKIPLOCK_DATABASE_URL", "DATABASE_URL")
# A second database URL for reads that may be stale (a standby): ``App(read_dsn=...)``,
# ``--read-dsn``, else this variable; none: reads go where writes do.
READ_ENV_VAR = "SKIPLOCK_READ_DATABASE_URL"
PREPARED_STATEMENTS_VAR = "SKIPLOCK_PREPARED_STATEMENTS"
CONNECT_TIMEOUT = 5
# libpq settings for every connection skiplock opens (ignored on Unix sockets): probe an idle
# connection after 5 s, every 2 s, and drop one whose data or probes go unacknowledged for
# 10 s.  A healthy server's kernel acknowledges however busy the server is, so a long statement
# is never cut; a worker's heartbeat (every lease / 3, 10 s by default) stuck on a dead
# connection fails in time for the next one, on a new connection, to keep its 30 s leases.
DEAD_PEER_PARAMS = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,  # milliseconds; libpq 12 and later
}
# Sessions a worker process opens (docs/operations.md, "Connections"): a pool of
# WORKER_POOL_MIN to WORKER_POOL_MAX connections, and one more per slot for held-lock jobs
# (each keeps its transaction's connection); one listener; and, while the listener starts, one
# short session that sends it a probe notification.  An App's client (enqueue, status, the
# dashboard) opens a pool of up to CLIENT_POOL_MAX.
WORKER_POOL_MIN = 2
# How long a pool retries a lost connection before it gives that chain of tries up and begins a
# new one at once (tests/integration/test_pool_reconnect.py): psycopg_pool's delay between tries
# doubles from 1 s, so a pool left alone waits up to twice a long outage after the server is
# back, while its worker's leases run out; so bounded, the wait between tries stays about 2 s.
RECONNECT_WINDOW = 3.0
WORKER_APPLICATION_NAME = "skiplock-worker"  # a worker's pooled sessions (the listener's differ)
WORKER_POOL_MAX = 6
CLIENT_POOL_MAX = 4
# What a server says when it has no slot for a new session (SQLSTATE 53300, which libpq does
# not pass on for a refused connection): max_connections reached, the slots left reserved for
# superusers (or, from PostgreSQL 16, for pg_use_reserved_connections), a role's or database's
# CONNECTION LIMIT reached.
NO_SLOT_MESSAGES = (
    "too many clients already",
    "remaining connection slots are reserved",
    "too many connections for role",
    "too many connections for database",
)
_ON = ("1", "true", "on", "yes")
_OFF = ("0", "false", "off", "no")


def resolve_dsn(explicit: str | None = None) -> str:
    for candidate in (explicit, *(os.environ.get(name) for name in ENV_VARS)):
        if candidate:
            return check_dsn(candidate)
    return embedded.start()


def resolve_read_dsn(explicit: str | None = None) -> str | None:
    """The read DSN (see :data:`READ_ENV_VAR`), or None."""
    candidate = explicit or os.environ.get(READ_ENV_VAR)
    return check_dsn(candidate) if candidate else None


def check_dsn(dsn: str) -> str:
    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"invalid database URL {redact(dsn)!r}: {_unquoted(_first_line(exc))}; expected e.g. "
            "postgresql://user:password@host:5432/dbname"
        ) from None
    return dsn


def _unquoted(reason: str) -> str:
    """libpq's reason for refusing a DSN without the word it quotes (``missing "=" after
    "..."``), which may be a piece of a password (one with a space in it, unquoted), unless it
    is one of libpq's option names."""
    known = _conninfo_keywords()
    return re.sub(r'"([^"]*)"', lambda m: m.group(0) if m.group(1) in known else '"***"', reason)


@cache
def _conninfo_keywords() -> frozenset[str]:
    return frozenset({"=", *(d.keyword.decode() for d in pq.Conninfo.get_defaults())})


def redact(dsn: str) -> str:
    """The DSN with its passwords hidden (``password``, and ``sslpassword``, which decrypts
    the client's TLS key), for messages and logs."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    for key in params:
        if key.endswith("password"):
            params[key] = "***"
    return conninfo.make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def prepared_statements_setting(explicit: bool | None = None) -> bool:
    """Whether skiplock's connections may use prepared statements: ``explicit`` if given,
    else ``SKIPLOCK_PREPARED_STATEMENTS`` (on by default)."""
    if explicit is not None:
        return explicit
    value = os.environ.get(PREPARED_STATEMENTS_VAR, "").strip().lower()
    if not value or value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigurationError(
        f"{PREPARED_STATEMENTS_VAR} must be one of {', '.join(_ON + _OFF)}, got {value!r}"
    )


def connect_kwargs(
    dsn: str, *, prepare: bool = True, application_name: str = "skiplock"
) -> dict[str, Any]:
    """Keyword arguments for every connection skiplock opens itself; ``prepare=False`` keeps
    psycopg from preparing statements on it (see the module's doc).  ``application_name``
    unless the DSN names one: ``skiplock``, ``skiplock-worker`` for a worker's pool (which
    ``skiplock doctor`` counts as the fleet's)."""
    params = conninfo.conninfo_to_dict(dsn)
    extra: dict[str, Any] = {"autocommit": True}
    if not prepare:
        extra["prepare_threshold"] = None
    if "connect_timeout" not in params:
        extra["connect_timeout"] = CONNECT_TIMEOUT
    for key, value in dead_peer_params().items():
        if key not in params:  # the DSN's own settings win, each one
            extra[key] = value
    if "application_name" not in params:
        extra["application_name"] = application_name
    return extra


def dead_peer_params() -> dict[str, int]:
    """:data:`DEAD_PEER_PARAMS` that this libpq knows (``tcp_user_timeout`` came in 12)."""
    if psycopg.pq.version() >= 120000:
        return dict(DEAD_PEER_PARAMS)
    return {k: v for k, v in DEAD_PEER_PARAMS.items() if k != "tcp_user_timeout"}


def server_watch_settings(dsn: str) -> dict[str, str] | None:
    """The same dead-peer settings for the server's side of a session (the parameters of the
    ``session_watch_client`` statement), from the DSN's values where it names them; None when
    the DSN turns keepalives off."""
    params = {**dead_peer_params(), **conninfo.conninfo_to_dict(dsn)}
    if str(params.get("keepalives", 1)) == "0":
        return None
    return {
        "idle": str(params["keepalives_idle"]),
        "interval": str(params["keepalives_interval"]),
        "count": str(params["keepalives_count"]),
        "user_timeout": str(params.get("tcp_user_timeout", 0)),
    }


def worker_pool_max(concurrency: int, held: bool) -> int:
    """The most connections a worker process's pool opens."""
    return WORKER_POOL_MAX + (concurrency if held else 0)


def worker_connections(concurrency: int, *, held: bool = False, listen: bool = True) -> int:
    """The most sessions one worker process holds at once: its pool, its listener and the
    listener's probe (see :data:`WORKER_POOL_MIN`)."""
    return worker_pool_max(concurrency, held) + (2 if listen else 0)


def no_slot(exc: BaseException) -> bool:
    """Whether a refused connection was refused for want of a free slot on the server."""
    text = str(exc)
    return any(message in text for message in NO_SLOT_MESSAGES)


def unavailable(exc: BaseException, dsn: str) -> DatabaseUnavailable:
    if no_slot(exc):
        return NoConnectionSlot(
            f"PostgreSQL at {redact(dsn)} has no connection slot free: {_first_line(exc)}. "
            "Its max_connections (less superuser_reserved_connections) are in use; "
            "`skiplock doctor --workers N` shows the headroom: raise max_connections, or run "
            "fewer worker processes with a higher --concurrency each"
        )
    return DatabaseUnavailable(
        f"cannot connect to PostgreSQL at {redact(dsn)}: {_first_line(exc)}. Check that the "
        "server is running and the URL (--dsn / SKIPLOCK_DATABASE_URL) is right"
    )


def translate(exc: psycopg.Error, schema: str) -> Exception:
    """Turn a driver error into the skiplock error that explains it, or return it unchanged."""
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
        return SchemaNotMigrated(schema)
    if isinstance(exc, psycopg.errors.UndefinedFunction | psycopg.errors.UndefinedColumn):
        # skiplock's statements name only what its migrations create: the schema is older.
        return SchemaNotMigrated(schema, detail=_first_line(exc))
    bound = _broken_bound(exc)
    if bound is not None:
        return bound
    if _prepared_statement_mixup(exc):
        return ConfigurationError(
            f"{_first_line(exc)}: a transaction-mode connection pooler (PgBouncer before 1.21, "
            "or with max_prepared_statements = 0) seems to sit between skiplock and PostgreSQL. "
            f"Turn prepared statements off for it: {PREPARED_STATEMENTS_VAR}=off, or "
            "App(prepared_statements=False); on your own connections, prepare_threshold=None"
        )
    if connection_lost(exc):
        return DatabaseUnavailable(f"lost the connection to PostgreSQL: {_first_line(exc)}")
    return exc


# SQLSTATEs of a server that ended or refused the session: shut down by an admin, crashed, still
# starting up, or an idle session timed out.  Class 08 (connection exception) counts as a whole,
# and so does any error of severity FATAL (the server ends the session after sending it: an
# idle-in-transaction timeout, 25P03, say).
SESSION_ENDED = frozenset({"57P01", "57P02", "57P03", "57P05"})


def connection_lost(exc: psycopg.Error) -> bool:
    """Whether ``exc`` means the connection is gone or refused (another try, on a new
    connection, may succeed), judged by its SQLSTATE: an error about the data or a server limit
    (class 22, 23, 54, ...) is not, even the ones psycopg makes an OperationalError."""
    state = exc.sqlstate
    if state is None:  # raised by the client: the connection closed, or its socket failed
        return isinstance(exc, psycopg.OperationalError)
    if state.startswith("08") or state in SESSION_ENDED:
        return True
    return exc.diag.severity_nonlocalized in ("FATAL", "PANIC")


def _broken_bound(exc: psycopg.Error) -> InvalidPayload | None:
    """A row the jobs table refused for breaking one of enqueue's bounds (a jobs_bound_*
    constraint), as the error enqueue would have raised."""
    if not isinstance(exc, psycopg.errors.CheckViolation):
        return None
    name = exc.diag.constraint_name or ""
    if name not in TABLE_BOUNDS:
        return None
    return InvalidPayload(f"the jobs table refused the job ({name}): it needs {TABLE_BOUNDS[name]}")


def _prepared_statement_mixup(exc: psycopg.Error) -> bool:
    """Whether psycopg's prepared statements went missing, clashed, or met another statement of
    the same name: the server connection changed under the client's.  (skiplock names no
    prepared statement itself; psycopg numbers them per connection, ``_pg3_0`` and on.)"""
    if isinstance(
        exc, psycopg.errors.DuplicatePreparedStatement | psycopg.errors.InvalidSqlStatementName
    ):
        return True
    # "bind message supplies 3 parameters, but prepared statement "_pg3_0" requires 8"
    return isinstance(exc, psycopg.errors.ProtocolViolation) and "prepared statement" in str(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
