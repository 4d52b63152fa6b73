"""The claims' plans with a limited key's backlog (issue 46, item 2): EXPLAIN (ANALYZE, BUFFERS)
of the claim of limited keys (its key lock, then its claim) and of the plain claim of the same
queue, on --jobs pending jobs of one key limited to 1,000 running, fresh and after a fifth of
them were claimed and finished in claims of 10 (no vacuum between, as under a steady drain).
Prints, per statement, its time, the index scans it ran, the rows they passed over, and the
buffers it touched.

    python -m bench.key_limits_plan [--dsn ...] [--jobs 100000]

It works in a schema of its own (``bench_keylim_plan``), dropped at the end.
"""

from __future__ import annotations

import argparse
from typing import Any

import psycopg

from bench.db import default_dsn
from skiplock import App
from skiplock._db.sql import Queries

SCHEMA = "bench_keylim_plan"


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


def explain(conn: psycopg.Connection[Any], text: str, params: dict[str, Any]) -> str:
    with conn.transaction(force_rollback=True):
        ((out,),) = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text, params
        ).fetchall()
    top = out[0]
    scans = [
        f"{n['Index Name']} ({n.get('Rows Removed by Filter', 0):,} passed over)"
        for n in nodes(top["Plan"])
        if n["Node Type"] == "Index Scan"
        and n["Relation Name"] == "jobs"
        and n["Actual Loops"]
        and n["Index Name"] != "jobs_pkey"
    ]
    hits = top["Plan"].get("Shared Hit Blocks", 0) + top["Plan"].get("Shared Read Blocks", 0)
    return f"{top['Execution Time']:9.2f} ms, {hits:7,} buffers; " + ", ".join(scans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = default_dsn()
    parser.add_argument("--dsn", default=default)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    app = App(args.dsn, SCHEMA)
    app.migrate()

    @app.task(name="noop", queue="kq")
    async def noop(n: int) -> None: ...

    q = Queries(SCHEMA)
    lock = {"queues": ["kq"], "after_key": None, "keys": 16}
    claim = {"queues": ["kq"], "keys": ["k"], "concurrency": [1000], "budget": [None],
             "limit": 10, "worker": "w", "lease_seconds": 60.0, "commit_async": True,
             "schema": SCHEMA}  # fmt: skip
    plain = {"queue": "kq", "limit": 10, "after_priority": None, "after_run_at": None,
             "after_id": None, "held_marker": False, "worker": "w", "lease_seconds": 60.0,
             "commit_async": True, "schema": SCHEMA}  # fmt: skip
    try:
        app.sync_client.set_key_limit("k", concurrency=1000)
        call = noop.with_options(limit_key="k")
        for start in range(0, args.jobs, 10_000):
            call.enqueue_many([{"n": i} for i in range(start, min(args.jobs, start + 10_000))])
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")
            for when in ("fresh", "a fifth drained"):
                if when != "fresh":
                    for _ in range(args.jobs // 50):
                        with conn.transaction():
                            conn.execute(q["limits_lock_keys_for_claim"], lock).fetchall()
                            rows = conn.execute(q["job_claim_key_limited"], claim).fetchall()
                        conn.execute(
                            f"UPDATE {SCHEMA}.jobs SET status = 'done', finished_at = now(), "
                            "locked_until = NULL WHERE id = ANY(%s)",
                            ([r[0] for r in rows],),
                        )
                print(f"{args.jobs:,} jobs of one limited key, {when}:")
                for label, name, params in (
                    ("lock the keys", "limits_lock_keys_for_claim", lock),
                    ("claim of limited keys", "job_claim_key_limited", claim),
                    ("plain claim", "job_claim", plain),
                ):
                    print(f"  {label:22} {explain(conn, q[name].as_string(), params)}")
    finally:
        app.sync_client.drop_schema()
        app.close()


if __name__ == "__main__":
    main()
