"""skiplock's own claim and finish statements, run by pgbench the way the ceiling runs the seed's.

The ceiling (``ceiling.py``) says what the seed's two statements cost with no worker at all.
This runs skiplock's instead, on skiplock's schema: the claim a worker sends (``job_claim``,
as ``claim_statement`` builds it: the better/after union, the entity-key checks, the lease
committed without waiting for the WAL flush) and the ownership-checked finish of what it
claimed (``job_complete_many`` or ``job_delete_many``).  The difference between the two says
what skiplock's SQL costs over the seed's; the difference between this and a skiplock drain
is what the Python worker costs (receiving and decoding the rows, running the handlers).

Differences from a worker, all in the statements' favour: the claimed rows are aggregated into
two arrays in the server (pgbench cannot hand a result set to the next statement), not sent;
every claim reads the claim index from its start (the worker's claim cursor lives in Python);
and the parameters other than the LIMIT are written into the statement.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from psycopg import sql

from skiplock import App
from skiplock._db.sql import Queries
from skiplock._db.statement_params import claim_statement

from .ceiling import Statements
from .db import BenchDatabase, connect

SCHEMA = "skiplock"
QUEUE = "bench"
WORKER = "pgbench"
LEASE_SECONDS = 300.0
FINISH = {"done": "job_complete_many", "delete": "job_delete_many"}
_PARAM = re.compile(r"%\((\w+)\)s")


def setup(db: BenchDatabase, pending: int) -> None:
    """A fresh database with skiplock's schema (its own migrations) and ``pending`` due jobs."""
    db.recreate()
    app = App(db.dsn, SCHEMA)
    try:
        app.migrate()
    finally:
        app.close()
    jobs = sql.Identifier(SCHEMA, "jobs")
    with connect(db.dsn) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (queue, task, payload)"
                " SELECT %s, 'noop', jsonb_build_object('n', g) FROM generate_series(0, %s - 1) g"
            ).format(jobs),
            (QUEUE, pending),
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))


def _fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``%(name)s`` replaced by ``values[name]`` (SQL or a pgbench variable)."""
    return _PARAM.sub(lambda m: values[m.group(1)], text).replace("%%", "%")


def _literal(value: Any) -> str:
    return sql.Literal(value).as_string(None)


def script(mode: str, batch: int) -> str:
    """One pgbench transaction pair: skiplock's claim of ``:n`` jobs, then their finish."""
    queries = Queries(SCHEMA)
    name, params = claim_statement([QUEUE], batch, WORKER, LEASE_SECONDS, None, schema=SCHEMA)
    values = {key: _literal(value) for key, value in params.items()}
    values["limit"] = ":n"
    claim = _fill(queries[name].as_string(None), values).rstrip().rstrip(";")
    finish = _fill(
        queries[FINISH[mode]].as_string(None),
        {
            "ids": ":ids",
            "attempts": ":attempts",
            "claim_time_index": ":claim_time_index",
            "claim_times": ":claim_times",
            "worker": _literal(WORKER),
        },
    )
    # The claimed jobs share one claim time (the claim statement's now()): the first of the
    # batch's distinct claim times, as a worker's write names it (see claim_arrays).
    aggregated = (
        f"WITH claimed AS ({claim})\n"
        "SELECT coalesce(array_agg(id), '{}') AS ids,"
        " coalesce(array_agg(attempts), '{}') AS attempts,"
        " coalesce(array_agg(1), '{}') AS claim_time_index,"
        " array[min(locked_at)] AS claim_times FROM claimed"
    )
    return f"{aggregated}\n\\gset\n{finish.rstrip()}\n"


SKIPLOCK = Statements("skiplock-sql", (SCHEMA, "jobs"), setup, script)
