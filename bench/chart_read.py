"""The dashboard charts' read (``job_finished_per_minute``) as it was (the statement of before,
the finished jobs' index keyed on the finish time alone: a heap page per job read) and as it
is (migration 0023's index covering the columns the read needs: an index-only scan, and the
statement that scans the read once), on the same rows, interleaved in one run.

    python -m bench.chart_read [--dsn postgresql://.../skiplock_bench_mine] [--jobs 1000000]
                               [--repeat 7] [--keep]

Two schemas get the same fill (bench/dashboard_pages.py's, with each finished job's finish time
spread over two hours independently of the rows' order, so that the jobs of a minute are
scattered over the table), then ``VACUUM ANALYZE``; the index of ``bench_chart_before`` is put
back as it was before migration 0023 and read with the statement as it was.  Each round runs
``EXPLAIN (ANALYZE, BUFFERS)`` of the read in both schemas, in alternating order, and prints
the server's time and buffers; then the medians.  Both schemas are dropped at the end (unless
``--keep``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

from bench.dashboard_pages import FILL
from bench.db import default_dsn
from skiplock import App
from skiplock._db.job_charts import CHART_MINUTES, CHART_SCAN
from skiplock._db.sql import Queries

SCHEMAS = ("bench_chart_before", "bench_chart_after")
SCATTER = "now() - make_interval(secs => g %% 7200)"  # finish times over two hours
OLD_INDEX = """
    DROP INDEX {schema}.jobs_finished_idx;
    CREATE INDEX jobs_finished_idx ON {schema}.jobs (finished_at)
        WHERE status IN ('done', 'failed', 'cancelled')
"""
# job_finished_per_minute before this change: a materialized read, scanned twice.
OLD_STATEMENT = """
WITH recent AS MATERIALIZED (
    SELECT queue, status, finished_at,
           greatest(extract(epoch FROM locked_at - run_at), 0)::float8 AS wait
    FROM {jobs}
    WHERE status IN ('done', 'failed')
      AND finished_at > now() - make_interval(mins => %(minutes)s)
    ORDER BY finished_at DESC
    LIMIT %(scan)s
), per_minute AS (
    SELECT queue, date_trunc('minute', finished_at) AS minute,
           count(*) FILTER (WHERE status = 'done') AS done,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           avg(wait) AS wait_mean,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY wait) AS wait_p95,
           max(wait) AS wait_max
    FROM recent
    GROUP BY 1, 2
)
SELECT p.queue, p.minute, p.done, p.failed, p.wait_mean, p.wait_p95, p.wait_max,
       r.scanned, r.oldest, now() AS now
FROM (SELECT count(*) AS scanned, min(finished_at) AS oldest FROM recent) AS r
LEFT JOIN per_minute AS p ON true
ORDER BY p.queue, p.minute;
"""


def fill(db: psycopg.Connection[Any], schema: str, jobs: int) -> None:
    text = FILL.as_string(db).replace('"bench_dashboard"', sql.Identifier(schema).as_string(db))
    finished = "CASE WHEN s.status IN ('done', 'failed', 'cancelled') THEN now() END"
    assert finished in text, "the dashboard bench's fill changed: update the scatter"
    text = text.replace(finished, finished.replace("now()", SCATTER))
    db.execute(text.encode(), [jobs])
    db.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, "jobs")))


def explain(db: psycopg.Connection[Any], schema: str) -> tuple[float, int, int, str]:
    """Server time (ms), shared buffers hit and read, and the scan node of the chart's read."""
    statement = Queries(schema)["job_finished_per_minute"]
    if schema == SCHEMAS[0]:
        jobs = sql.Identifier(schema, "jobs").as_string(db)
        statement = sql.SQL(OLD_STATEMENT.replace("{jobs}", jobs))
    params = {"minutes": CHART_MINUTES, "scan": CHART_SCAN}
    query = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + statement
    ((plan,),) = db.execute(query, params).fetchall()
    top = plan[0]
    scan = find_scan(top["Plan"])
    return (
        top["Execution Time"],
        top["Plan"]["Shared Hit Blocks"],
        top["Plan"]["Shared Read Blocks"],
        f"{scan['Node Type']} ({scan.get('Heap Fetches', '-')} heap fetches)",
    )


def find_scan(node: dict[str, Any]) -> dict[str, Any]:
    if node.get("Relation Name") == "jobs":
        return node
    for child in node.get("Plans", []):
        found = find_scan(child)
        if found:
            return found
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep both schemas (to EXPLAIN more)")
    args = parser.parse_args()
    apps = [App(args.dsn, schema) for schema in SCHEMAS]
    try:
        with psycopg.connect(args.dsn, autocommit=True) as db:
            for app in apps:
                app.sync_client.drop_schema()  # what an interrupted run left
                app.sync_client.migrate()
                began = time.perf_counter()
                fill(db, app.schema, args.jobs)
                print(f"{app.schema}: {args.jobs:,} jobs in {time.perf_counter() - began:.0f} s")
            for statement in OLD_INDEX.split(";"):
                db.execute(statement.format(schema=sql.Identifier(SCHEMAS[0]).as_string(db)))
            db.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(SCHEMAS[0], "jobs")))
            for schema in SCHEMAS:
                size = db.execute(
                    "SELECT pg_size_pretty(pg_relation_size(%s::regclass))",
                    [f'"{schema}".jobs_finished_idx'],
                ).fetchone()
                print(f"{schema}: jobs_finished_idx {size[0] if size else '?'}")
            times: dict[str, list[float]] = {s: [] for s in SCHEMAS}
            for n in range(args.repeat):
                for schema in SCHEMAS if n % 2 == 0 else SCHEMAS[::-1]:
                    ms, hit, read, scan = explain(db, schema)
                    times[schema].append(ms)
                    print(f"round {n}: {schema:20} {ms:8.1f} ms  hit {hit:6} read {read:6}  {scan}")
            before, after = (statistics.median(times[s]) for s in SCHEMAS)
            print(f"median ms: before {before:.1f}, after {after:.1f}, ratio {after / before:.2f}")
    finally:
        for app in apps:
            if not args.keep:
                app.sync_client.drop_schema()
            app.close()


if __name__ == "__main__":
    main()
