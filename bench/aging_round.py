"""What one aging round costs the leader on a large backlog (issue 46, item 3): --jobs pending
jobs of one queue, 10 priorities, run_at spread over the last hour, and the queue's aging step
--step seconds; the time of job_age_pending (at most 1,000 jobs) run --rounds times in a row,
and the same with aging off (one read of the settings).

    python -m bench.aging_round [--dsn ...] [--database skiplock_bench_x] [--jobs 200000]
        [--step 60] [--rounds 5]

Works in --database (created, and dropped at the end).  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from psycopg import sql

from bench.db import BenchDatabase, connect
from skiplock import App
from skiplock._db.sql import Queries
from skiplock._db.store_sync import SyncStore

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("SKIPLOCK_DATABASE_URL", DEFAULT_DSN))
    parser.add_argument("--database", default="skiplock_bench")
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--step", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    database = BenchDatabase(args.dsn, args.database)
    database.recreate()
    try:
        app = App(database.dsn, "aging")
        app.migrate()
        jobs = sql.Identifier("aging", "jobs")
        with connect(database.dsn) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (queue, task, payload, priority, run_at, status) "
                    "SELECT 'q', 't', '{{}}', n %% 10, now() - (n %% 3600) * interval '1 second', "
                    "'pending' FROM generate_series(1, %s) AS n"
                ).format(jobs),
                [args.jobs],
            )
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
            store = SyncStore(Queries("aging"))
            rows: list[tuple[str, list[float], list[int]]] = []
            for step in (None, args.step):
                app.sync_client.set_aging("q", step)
                times, aged = [], []
                for _ in range(args.rounds):
                    began = time.perf_counter()
                    done = store.job_age_pending(conn, 1000)
                    times.append((time.perf_counter() - began) * 1000)
                    aged.append(sum(done.values()))
                rows.append(("off" if step is None else f"step {step:g} s", times, aged))
        app.close()
    finally:
        database.drop()
    print(f"| aging ({args.jobs:,} pending, 10 priorities) | ms a round, median (runs) | aged |")
    print("|---|---|---|")
    for name, times, aged in rows:
        runs = ", ".join(f"{t:.1f}" for t in times)
        print(f"| {name} | {statistics.median(times):.1f} ({runs}) | {aged} |")


if __name__ == "__main__":
    main()
