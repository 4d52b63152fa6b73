"""What priority aging would cost the claim (issue 46, item 3): the claim's scan of 100 jobs
among many pending, ordered three ways, with EXPLAIN ANALYZE:

* strict: (priority, run_at, id), as the claim reads jobs_claim_idx today;
* aged at claim time: priority improved by the wait, ``priority - (now() - run_at) / step``,
  which no index can hold (it moves with now());
* aged by a fixed key: the same order, written as ``run_at + priority * step`` (a job's
  effective priority falls by one each ``step`` seconds it waits, so comparing two jobs at any
  instant compares these keys, which do not move), in an expression index of its own.

And what the second index costs an insert.  Prints a Markdown table.

    python -m bench.aging_plan [--dsn postgresql://...] [--jobs 200000] [--repeat 5]

It works in a schema of its own (``bench_aging``), dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import psycopg

from skiplock import App

SCHEMA = "bench_aging"
STEP = 60  # seconds of waiting that improve a job's priority by one
KEY = f"""CREATE FUNCTION {SCHEMA}.aging_key(priority int, run_at timestamptz) RETURNS float8
    LANGUAGE sql IMMUTABLE AS 'SELECT extract(epoch FROM run_at)::float8 + priority * {STEP}'"""
INDEX = f"""CREATE INDEX jobs_aging_idx ON {SCHEMA}.jobs
    (queue, {SCHEMA}.aging_key(priority, run_at), id) WHERE status = 'pending'"""
SCAN = (
    f"SELECT id FROM {SCHEMA}.jobs WHERE status = 'pending' AND queue = 'q' "
    "ORDER BY {order} LIMIT 100 FOR UPDATE SKIP LOCKED"
)
ORDERS = {
    "strict (priority, run_at)": "priority, run_at, id",
    "aged at claim time": f"priority - extract(epoch FROM now() - run_at) / {STEP}, id",
    "aged by a fixed key, indexed": f"{SCHEMA}.aging_key(priority, run_at), id",
}
INSERT = (
    f"INSERT INTO {SCHEMA}.jobs (queue, task, payload, priority, run_at) "
    "SELECT 'q', 't', '{}', (random() * 9)::int, now() - random() * interval '1 hour' "
    "FROM generate_series(1, %s)"
)


def plan(conn: psycopg.Connection[Any], order: str) -> tuple[float, str]:
    """Execution time (ms) and the nodes of the plan, outermost first."""
    ((explained,),) = conn.execute(
        "EXPLAIN (ANALYZE, FORMAT JSON) " + SCAN.format(order=order)
    ).fetchall()
    conn.rollback()
    top = explained[0] if isinstance(explained, list) else json.loads(explained)[0]
    nodes, node = [], top["Plan"]
    while node:
        nodes.append(
            node["Node Type"] + (f" on {node['Index Name']}" if "Index Name" in node else "")
        )
        node = (node.get("Plans") or [None])[0]
    return top["Execution Time"], " > ".join(nodes)


def insert_ms(conn: psycopg.Connection[Any], n: int) -> float:
    start = time.perf_counter()
    conn.execute(INSERT, (n,))
    conn.rollback()
    return (time.perf_counter() - start) * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.aging_plan", description=__doc__)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    app = App(args.dsn, SCHEMA)
    app.migrate()
    try:
        with psycopg.connect(args.dsn) as conn:
            conn.execute(INSERT, (args.jobs,))
            conn.execute(KEY)
            conn.commit()
            plain = [insert_ms(conn, 10_000) for _ in range(args.repeat)]
            conn.execute(INDEX)
            conn.execute(f"ANALYZE {SCHEMA}.jobs")
            conn.commit()
            indexed = [insert_ms(conn, 10_000) for _ in range(args.repeat)]
            print(f"{args.jobs:,} pending jobs, 10 priorities, run_at over the last hour\n")
            print("| order of the claim's scan (LIMIT 100) | plan | ms, min (median) |")
            print("|---|---|---|")
            for label, order in ORDERS.items():
                runs = [plan(conn, order) for _ in range(args.repeat)]
                times = [t for t, _ in runs]
                print(
                    f"| {label} | {runs[0][1]} | "
                    f"{min(times):.2f} ({statistics.median(times):.2f}) |"
                )
            print(
                f"\ninsert of 10,000 jobs, ms min (median): without the aging index "
                f"{min(plain):.0f} ({statistics.median(plain):.0f}), with it "
                f"{min(indexed):.0f} ({statistics.median(indexed):.0f})"
            )
    finally:
        app.sync_client.drop_schema()
        app.close()


if __name__ == "__main__":
    main()
