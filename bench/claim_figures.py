"""Quick figures for the core queue: enqueue rates, the claim's plan and round trip.

    python -m bench.claim_figures [--dsn DSN]

Creates and drops its own schema ``bench_claim_figures``; prints one line per figure.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from bench.db import default_dsn
from skiplock import App
from skiplock._db.store_sync import SyncStore

SCHEMA = "bench_claim_figures"


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = default_dsn()
    parser.add_argument("--dsn", default=default)
    dsn = parser.parse_args().dsn
    app = App(dsn, SCHEMA)
    app.sync_client.drop_schema()
    app.migrate()

    @app.task(name="noop")
    def noop(i: int) -> None: ...

    try:
        started = time.perf_counter()
        for i in range(500):
            noop.enqueue(i=i)
        print(f"single enqueue (pooled, autocommit): {500 / (time.perf_counter() - started):.0f}/s")
        started = time.perf_counter()
        for _ in range(5):
            noop.enqueue_many([{"i": i} for i in range(10_000)])
        print(f"bulk enqueue (10,000 per call): {50_000 / (time.perf_counter() - started):.0f}/s")
        with psycopg.connect(dsn, autocommit=True) as conn:
            table = f'"{SCHEMA}".jobs'
            conn.execute(f"UPDATE {table} SET status = 'done', finished_at = now()")
            conn.execute(
                f"INSERT INTO {table} (queue, task, payload, status, finished_at) "
                "SELECT 'default', 'noop', '{}', 'done', now() FROM generate_series(1, 100000)"
            )
            conn.execute(
                f"INSERT INTO {table} (queue, task, payload) "
                "SELECT 'default', 'noop', '{}' FROM generate_series(1, 1000)"
            )
            conn.execute(f"VACUUM ANALYZE {table}")
            pages = conn.execute(f"SELECT relpages FROM pg_class WHERE oid = '{table}'::regclass")
            params = {
                "queue": "default",
                "limit": 10,
                "worker": "w",
                "lease_seconds": 30,
                "commit_async": True,
                "held_marker": False,
                "schema": app.schema,
                # From the start of the index, as a worker's first claim (the costliest).
                "after_priority": None,
                "after_run_at": None,
                "after_id": None,
            }
            query = app.queries["job_claim"].as_string()
            with psycopg.ClientCursor(conn) as cur:
                explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + cur.mogrify(query, params)
                row = cur.execute(explain).fetchone()
            assert row is not None
            plan = row[0][0]
            kinds = sorted({n["Node Type"] for n in _nodes(plan["Plan"])})
            indexes = sorted({n["Index Name"] for n in _nodes(plan["Plan"]) if "Index Name" in n})
            buffers = plan["Plan"].get("Shared Hit Blocks", 0) + plan["Plan"].get(
                "Shared Read Blocks", 0
            )
            print(f"claim plan nodes: {kinds}; indexes: {indexes}")
            print(
                f"claim of 10 with 100,000 done rows: {plan['Execution Time']:.2f} ms, "
                f"{buffers} buffers of a {pages.fetchone()[0]}-page table"  # type: ignore[index]
            )
            store = SyncStore(app.queries)
            times = []
            for _ in range(200):
                started = time.perf_counter()
                store.job_claim(conn, ["default"], 1, "w", 30)
                times.append(time.perf_counter() - started)
            times.sort()
            print(
                f"claim 1 round trip: p50 {times[100] * 1e3:.2f} ms, p99 {times[198] * 1e3:.2f} ms"
            )
    finally:
        app.sync_client.drop_schema()
        app.close()


if __name__ == "__main__":
    main()
