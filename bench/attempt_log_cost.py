"""What migration 0018's attempt log costs a failed attempt: 10,000 running jobs failed by one
UPDATE shaped like ``job_fail_many`` (a 500-character error), without and with the
``attempt_log`` append, interleaved over ``--repeat`` rounds (VACUUM before each); prints the
min and median milliseconds.  Figures in bench/README.md ("Dashboard page times").

    python -m bench.attempt_log_cost [--dsn postgresql://...] [--repeat 9]

It works in a schema of its own (``bench_failcost``), dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from psycopg import sql

from bench.db import default_dsn
from skiplock import App

SCHEMA = "bench_failcost"
JOBS = sql.Identifier(SCHEMA, "jobs")
ERROR = (
    "Traceback (most recent call last):\n" + "  File x, line 1, in f\n" * 20 + "ValueError: boom"
)
FILL = sql.SQL(
    "TRUNCATE {jobs}; INSERT INTO {jobs} (queue, task, payload, status, attempts, locked_by, "
    "locked_at, locked_until) SELECT 'q', 't', jsonb_build_object('n', g), 'running', 1, 'w', "
    "now(), now() + interval '1 hour' FROM generate_series(1, 10000) AS g"
).format(jobs=JOBS)
PLAIN = sql.SQL(
    "UPDATE {jobs} AS j SET status = 'pending', last_error = %s, locked_until = NULL "
    "WHERE status = 'running'"
).format(jobs=JOBS)
LOGGED = sql.SQL(
    "UPDATE {jobs} AS j SET status = 'pending', last_error = %s, locked_until = NULL, "
    "attempt_log = {append}(j.attempt_log, jsonb_build_object('attempt', j.attempts, "
    "'worker', j.locked_by, 'started_at', j.locked_at, 'ended_at', now(), "
    "'error', left(%s, 2000), 'outcome', 'retried')) WHERE status = 'running'"
).format(jobs=JOBS, append=sql.Identifier(SCHEMA, "attempt_log_append"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    app = App(args.dsn, SCHEMA)
    app.sync_client.drop_schema()  # what an interrupted run left
    app.sync_client.migrate()
    times: dict[str, list[float]] = {"without the log": [], "with the log": []}
    try:
        with psycopg.connect(args.dsn, autocommit=True) as db:
            for _ in range(args.repeat):
                for name, statement, params in (
                    ("without the log", PLAIN, [ERROR]),
                    ("with the log", LOGGED, [ERROR, ERROR]),
                ):
                    db.execute(FILL)
                    db.execute(sql.SQL("VACUUM {}").format(JOBS))
                    start = time.perf_counter()
                    db.execute(statement, params)
                    times[name].append((time.perf_counter() - start) * 1e3)
        for name, figures in times.items():
            print(
                f"{name:16} min {min(figures):7.1f}  median {statistics.median(figures):7.1f}"
                " ms per 10,000 failed attempts"
            )
    finally:
        app.sync_client.drop_schema()


if __name__ == "__main__":
    main()
