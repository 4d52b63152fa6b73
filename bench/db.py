"""The benchmark's database: created fresh for every system and workload, and measured.

Everything runs in one dedicated database (``skiplock_bench`` by default) on the server the
``--dsn`` names; it is dropped and created again before each measured run, so no system sees
another's tables, bloat or statistics.  The measurements read only what PostgreSQL exposes
without extensions: ``pg_stat_database`` (transactions), ``pg_stat_user_tables`` (tuples,
dead tuples), ``pg_current_wal_lsn()`` (WAL bytes) and ``/proc/<pid>/stat`` of the backends
that ``pg_stat_activity`` lists for the database (server CPU).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import conninfo, sql

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def default_dsn() -> str:
    return os.environ.get("SKIPLOCK_DATABASE_URL") or DEFAULT_DSN


def with_dbname(dsn: str, dbname: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return conninfo.make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def as_url(dsn: str) -> str:
    """The DSN as a postgresql:// URL (PGQueuer's asyncpg driver wants one).  The host and port
    go in the query string, where both asyncpg and libpq read them and where a unix socket's
    directory is a plain value (in the URL's authority its slashes would start the path)."""
    p = conninfo.conninfo_to_dict(dsn)
    user = quote(str(p.get("user") or "postgres"), safe="")
    auth = f"{user}:{quote(str(p['password']), safe='')}@" if p.get("password") else f"{user}@"
    params = {"host": p.get("host") or "127.0.0.1", "port": p.get("port") or "5432"}
    if p.get("sslmode"):
        params["sslmode"] = p["sslmode"]
    dbname = quote(str(p.get("dbname") or ""), safe="")
    return f"postgresql://{auth}/{dbname}?{urlencode(params)}"


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, application_name="bench-monitor", **kwargs)


class BenchDatabase:
    """Creates and drops the dedicated database; ``dsn`` connects to it."""

    def __init__(self, server_dsn: str, name: str) -> None:
        self.server_dsn = server_dsn
        self.name = name
        self.dsn = with_dbname(server_dsn, name)
        self.url = as_url(self.dsn)

    def through(self, dsn: str) -> BenchDatabase:
        """The same database, reached by ``dsn`` (e.g. through a proxy)."""
        other = BenchDatabase(self.server_dsn, self.name)
        other.dsn = dsn
        other.url = as_url(dsn)
        return other

    def recreate(self, template: str | None = None) -> None:
        """Dropped and created again: empty, or a copy of the database ``template``."""
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name))
        if template is not None:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with connect(self.server_dsn) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )
            conn.execute(create)

    def drop(self) -> None:
        with connect(self.server_dsn) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )


def server_info(dsn: str) -> dict[str, str]:
    with connect(dsn) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        settings = dict(
            conn.execute(
                "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
                (
                    [
                        "shared_buffers",
                        "synchronous_commit",
                        "fsync",
                        "max_connections",
                        "autovacuum",
                        "wal_level",
                        "max_wal_size",
                    ],
                ),
            ).fetchall()
        )
    return {"server_version": str(version[0] if version else "?"), **settings}


@dataclass
class Counters:
    """Database-wide counters at one moment."""

    xacts: int  # committed + rolled back transactions in the bench database
    wal: int  # bytes, pg_current_wal_lsn() (server-wide)
    tup_ins: int
    tup_upd: int
    tup_hot_upd: int
    tup_del: int

    def minus(self, other: Counters) -> Counters:
        return Counters(*(getattr(self, f) - getattr(other, f) for f in self.__dataclass_fields__))


def counters(conn: psycopg.Connection[Any], dbname: str) -> Counters:
    """Counters now; reads the cumulative statistics afresh (no cached snapshot)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        """
        SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s),
               pg_current_wal_lsn() - '0/0'::pg_lsn,
               coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0),
               coalesce(sum(n_tup_hot_upd), 0), coalesce(sum(n_tup_del), 0)
        FROM pg_stat_user_tables
        """,
        (dbname,),
    ).fetchone()
    assert row is not None
    return Counters(*(int(v or 0) for v in row))


def read_counters(dsn: str, dbname: str) -> Counters:
    """Counters read on a connection of their own, closed at once so that its own two
    transactions are flushed into the statistics right away (they count in the next delta:
    subtract ``COUNTER_XACTS``)."""
    with connect(dsn) as conn:
        return counters(conn, dbname)


COUNTER_XACTS = 2


def backend_pids(conn: psycopg.Connection[Any], dbname: str) -> set[int]:
    """Backends connected to the bench database (autovacuum workers included), but not ours."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
        " AND application_name <> 'bench-monitor'",
        (dbname,),
    ).fetchall()
    return {r[0] for r in rows}


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (the skiplock supervisor's children, say)."""
    out = [pid]
    i = 0
    while i < len(out):
        p = out[i]
        i += 1
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    out.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out
