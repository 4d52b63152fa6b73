"""How long the dashboard's pages take with many jobs: a throwaway schema filled by SQL with
``--jobs`` jobs (done, failed with an attempt history, pending, scheduled, cancelled, across 5
queues and 20 tasks), the dashboard served by uvicorn on 127.0.0.1, each page fetched
``--repeat`` times over HTTP; prints p50 / p95 / max milliseconds per page.  Every finished
job finished now: the charts' window holds them all, their worst case (a read stopped at
its bound).

    python -m bench.dashboard_pages [--dsn postgresql://...] [--jobs 10000] [--repeat 20]

It works in a schema of its own (``bench_dashboard``), dropped at the end.  The figures are in
bench/README.md ("Dashboard page times").
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import uvicorn
from psycopg import sql

from bench.db import default_dsn
from skiplock import App
from skiplock.dashboard import create_dashboard

SCHEMA = "bench_dashboard"
JOBS = sql.Identifier(SCHEMA, "jobs")
# One in 20 jobs failed (after 3 attempts, each in its attempt_log; all in queue q0, of whose
# jobs they are a fifth), 1 in 50 pending, 1 in 100 scheduled, 1 in 100 cancelled, the rest
# done: a queue that keeps its finished jobs.
FILL = sql.SQL(
    """
    INSERT INTO {jobs} (queue, task, payload, status, run_at, attempts, max_attempts,
                        locked_by, locked_at, last_error, finished_at, attempt_log)
    SELECT 'q' || (g %% 5), 'task.t' || (g %% 20),
           jsonb_build_object('user', g %% 10000, 'order', g, 'note', 'some text of the order'),
           s.status,
           now() + CASE WHEN s.status = 'scheduled' THEN interval '1 hour' ELSE interval '0' END,
           CASE WHEN s.status = 'failed' THEN 3 WHEN s.status = 'done' THEN 1 ELSE 0 END, 3,
           CASE WHEN s.status IN ('done', 'failed') THEN 'host-1:4242:w' END,
           CASE WHEN s.status IN ('done', 'failed') THEN now() END,
           CASE WHEN s.status = 'failed' THEN 'ValueError: no data' END,
           CASE WHEN s.status IN ('done', 'failed', 'cancelled') THEN now() END,
           CASE WHEN s.status = 'failed' THEN (
               SELECT jsonb_agg(jsonb_build_object(
                   'attempt', a, 'worker', 'host-1:4242:w', 'started_at', now(),
                   'ended_at', now(), 'outcome', CASE WHEN a = 3 THEN 'failed' ELSE 'retried' END,
                   'error', 'Traceback (most recent call last): ...' || repeat('x', 500)
                            || ' ValueError: no data'))
               FROM generate_series(1, 3) AS a) END
    FROM generate_series(1, %s) AS g,
         LATERAL (SELECT CASE WHEN g %% 20 = 0 THEN 'failed' WHEN g %% 50 = 1 THEN 'pending'
                              WHEN g %% 100 = 2 THEN 'scheduled' WHEN g %% 100 = 3 THEN 'cancelled'
                              ELSE 'done' END AS status) AS s
    """
).format(jobs=JOBS)


@contextmanager
def serving(asgi: Any) -> Iterator[str]:
    server = uvicorn.Server(
        uvicorn.Config(asgi, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def timed_get(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        response.read()
        assert response.status == 200, url
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    app = App(args.dsn, SCHEMA)
    app.sync_client.drop_schema()  # what an interrupted run left
    app.sync_client.migrate()
    try:
        with psycopg.connect(args.dsn, autocommit=True) as db:
            start = time.perf_counter()
            db.execute(FILL, [args.jobs])
            db.execute(sql.SQL("VACUUM ANALYZE {}").format(JOBS))
            print(f"{args.jobs:,} jobs inserted in {time.perf_counter() - start:.1f} s")
            (failed,) = db.execute(
                sql.SQL("SELECT max(id) FROM {} WHERE status = 'failed'").format(JOBS)
            ).fetchone() or (None,)
        pages = {
            "queues": "/",
            "jobs (newest 50)": "/jobs",
            "jobs, status=failed queue=q0 (1 in 5 match)": "/jobs?status=failed&queue=q0",
            "jobs, status=pending task=task.t7 (1 in 1000)": "/jobs?status=pending&task=task.t7",
            "jobs, status=failed queue=q1 (none match)": "/jobs?status=failed&queue=q1",
            "jobs, payload user=42 (search)": "/jobs?key=user&value=42",
            "job with 3 attempts": f"/jobs/{failed}",
            "bulk retry count, queue=q0": "/jobs/bulk?action=retry&status=failed&queue=q0",
            "bulk delete count, queue=q1 (finished)": "/jobs/bulk?action=delete&queue=q1",
            "api/charts (last hour, bounded read)": "/api/charts",
            "queue settings page (q0)": "/queues/q0",
            "workers": "/workers",
            "api/queues (live update)": "/api/queues",
        }
        with serving(create_dashboard(app, token=None)) as base:
            print(f"{'page':48} {'p50':>8} {'p95':>8} {'max':>8}  (ms, {args.repeat} runs)")
            for name, path in pages.items():
                timed_get(base + path)  # warm: the pool's connections, prepared statements
                times = sorted(timed_get(base + path) for _ in range(args.repeat))
                p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
                print(f"{name:48} {statistics.median(times):8.1f} {p95:8.1f} {times[-1]:8.1f}")
    finally:
        App(args.dsn, SCHEMA).sync_client.drop_schema()


if __name__ == "__main__":
    main()
