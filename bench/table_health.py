"""Claim, status and the dashboard's queues page with 10,000 and with 10,000,000 finished jobs
in the table (issue 46, item 5): each must stay within 1.5 times its cost at 10,000.

Two throwaway schemas get, by SQL, ``--small`` and ``--large`` done / failed / cancelled jobs
(16:3:1) across 5 queues, and the same live ones (2,000 pending, 200 scheduled, 20 running),
and are vacuumed and analyzed as autovacuum would.  Then, in ``--rounds`` rounds that
alternate between the two (the machine is shared: both sizes see the same minutes), each
table is vacuumed (as autovacuum would after the rolled-back claims) and each operation is
timed ``--repeat`` times:

- claim: ``job_claim`` of 10 jobs from one queue, rolled back (so every run finds the same);
- status: ``queue_status``, the statement behind ``skiplock status``, the metrics exporter and
  the dashboard's queues page;
- the dashboard's queues page (``/``) and its live update (``/api/queues``) over HTTP (uvicorn
  on 127.0.0.1, no token);
- for reference, a count of the whole table by queue and status
  (``job_count_by_queue_and_status``), which is how ``queue_status`` counted before.

    python -m bench.table_health [--dsn postgresql://...] [--small 10000] [--large 10000000]

Prints medians and p95 in milliseconds and the ratios; the figures are in bench/README.md
("Tables that stay healthy").  The schemas are dropped at the end (``--keep`` keeps them, and
a later run with ``--keep`` reuses a schema that holds the jobs it would make).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from bench.dashboard_pages import serving, timed_get
from bench.db import default_dsn
from skiplock import App
from skiplock._db.store_sync import SyncStore
from skiplock.dashboard import create_dashboard

SCHEMA = "bench_table_health"
FINISHED = sql.SQL(
    """
    INSERT INTO {jobs} (queue, task, payload, status, run_at, attempts, max_attempts,
                        locked_by, locked_at, last_error, finished_at, created_at)
    SELECT 'q' || (g %% 5), 'task.t' || (g %% 20), jsonb_build_object('order', g), s.status,
           t, 1, 3, 'host-1:4242:w', t,
           CASE WHEN s.status = 'failed' THEN 'ValueError: no data' END, t, t
    FROM generate_series(%s::bigint, %s::bigint) AS g,
         LATERAL (SELECT CASE WHEN g %% 20 < 16 THEN 'done' WHEN g %% 20 < 19 THEN 'failed'
                              ELSE 'cancelled' END AS status,
                         now() - interval '2 hours' AS t) AS s
    """
)
LIVE = sql.SQL(
    """
    INSERT INTO {jobs} (queue, task, payload, status, run_at, attempts, locked_by, locked_at,
                        locked_until)
    SELECT 'q' || (g %% 5), 'task.t' || (g %% 20), jsonb_build_object('order', g), s.status,
           now() + CASE WHEN s.status = 'scheduled' THEN interval '1 day' ELSE interval '0' END,
           CASE WHEN s.status = 'running' THEN 1 ELSE 0 END,
           CASE WHEN s.status = 'running' THEN 'host-1:4242:w' END,
           CASE WHEN s.status = 'running' THEN now() END,
           CASE WHEN s.status = 'running' THEN now() + interval '1 day' END
    FROM generate_series(1, 2220) AS g,
         LATERAL (SELECT CASE WHEN g <= 2000 THEN 'pending' WHEN g <= 2200 THEN 'scheduled'
                              ELSE 'running' END AS status) AS s
    """
)


def timed(run: Callable[[], Any], repeat: int) -> list[float]:
    run()  # warm: plans, caches, the pool's connections
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return times


class Sized:
    """One schema with ``finished`` finished jobs, its app, store and dashboard."""

    def __init__(self, dsn: str, finished: int) -> None:
        self.dsn = dsn
        self.finished = finished
        self.schema = f"{SCHEMA}_{finished}"
        self.app = App(dsn, self.schema)
        self.store = SyncStore(self.app.queries)
        self.times: dict[str, list[float]] = {}

    def fill(self, keep: bool, chunk: int = 1_000_000) -> None:
        jobs = sql.Identifier(self.schema, "jobs")
        with psycopg.connect(self.dsn, autocommit=True) as db:
            if keep:
                counted = db.execute(
                    "SELECT n_live_tup FROM pg_stat_user_tables "
                    "WHERE schemaname = %s AND relname = 'jobs'",
                    [self.schema],
                ).fetchone()
                if counted and counted[0] >= 0.9 * self.finished:  # an estimate
                    print(f"{self.schema}: kept from a run before")
                    return
            self.app.sync_client.drop_schema()
            self.app.sync_client.migrate()
            start = time.perf_counter()
            for lo in range(1, self.finished + 1, chunk):
                db.execute(FINISHED.format(jobs=jobs), [lo, min(self.finished, lo + chunk - 1)])
            db.execute(LIVE.format(jobs=jobs), [])
            db.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
            print(f"{self.schema}: filled in {time.perf_counter() - start:.0f} s")

    def measure(self, base: str, repeat: int) -> None:
        store = self.store
        with psycopg.connect(self.dsn, autocommit=True) as db:
            # What autovacuum does on a live server (this one may run without it): the
            # rolled-back claims leave dead rows and clear pages' all-visible bits.
            db.execute(sql.SQL("VACUUM {}").format(sql.Identifier(self.schema, "jobs")))
        with (
            psycopg.connect(self.dsn) as claim_conn,
            psycopg.connect(self.dsn, autocommit=True) as conn,
        ):

            def claim() -> None:
                jobs = store.job_claim(claim_conn, ["q1"], 10, "bench", 30.0)
                assert len(jobs) == 10
                claim_conn.rollback()

            runs = {
                "claim 10 (job_claim, rolled back)": claim,
                "status (queue_status)": lambda: store.queue_status(conn),
                "dashboard queues page (/)": lambda: timed_get(base + "/"),
                "dashboard /api/queues": lambda: timed_get(base + "/api/queues"),
            }
            for name, run in runs.items():
                self.times.setdefault(name, []).extend(timed(run, repeat))
            name = "whole-table count (the old status)"
            count = lambda: store.job_count_by_queue_and_status(conn)  # noqa: E731
            self.times.setdefault(name, []).extend(timed(count, max(1, repeat // 10)))


def p95(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    sizes = [Sized(args.dsn, args.small), Sized(args.dsn, args.large)]
    try:
        for sized in sizes:
            sized.fill(args.keep)
        with contextlib.ExitStack() as stack:
            bases = [
                stack.enter_context(serving(create_dashboard(s.app, token=None))) for s in sizes
            ]
            for _ in range(args.rounds):
                for sized, base in zip(sizes, bases, strict=True):
                    sized.measure(base, args.repeat)
        small, large = sizes
        head = "operation (ms, median / p95)"
        print(f"{head:40} {small.finished:>15,} {large.finished:>17,}  ratio")
        for name, a in small.times.items():
            b = large.times[name]
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"{name:40} {ma:7.1f} / {p95(a):6.1f} {mb:9.1f} / {p95(b):6.1f}  {mb / ma:5.2f}")
    finally:
        for sized in sizes:
            if not args.keep:
                sized.app.sync_client.drop_schema()
            sized.app.close()


if __name__ == "__main__":
    main()
