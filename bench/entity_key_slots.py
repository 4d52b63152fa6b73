"""Keyed claims and a held-lock drain, for the entity-key slots (docs/design.md, "Entity keys
of held-lock jobs: row locks in slots"): one round of the tree on ``PYTHONPATH``.

    PYTHONPATH=<tree>/src python -m bench.entity_key_slots [--dsn DSN] [--jobs N]

Prints one JSON line: the median time of a leased claim of 100 jobs with distinct entity keys,
of a held-lock claim of one such job, and the jobs/s of held-lock drains (10 slots) of jobs with
distinct keys and without keys.  Compare trees by running rounds of each in turn (the machine's
load moves more than the difference), e.g. main's (``git archive main | tar -x -C DIR``) and
this one's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import time

import psycopg

from bench.db import default_dsn
from skiplock import App, Worker
from skiplock._db.sql import Queries
from skiplock._db.store_sync import SyncStore


def _fill(dsn: str, schema: str, n: int, keyed: bool) -> None:
    key = "'k' || g" if keyed else "NULL"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".jobs (queue, task, payload, entity_key) '
            f"SELECT 'q', 'noop', '{{}}', {key} FROM generate_series(1, {int(n)}) AS g"
        )
        conn.execute(f'VACUUM ANALYZE "{schema}".jobs')


def claims(dsn: str) -> dict[str, float]:
    schema = f"bench_slots_{secrets.token_hex(4)}"
    app = App(dsn, schema)
    app.migrate()
    store = SyncStore(Queries(schema))
    try:
        _fill(dsn, schema, 30_000, keyed=True)
        leased, held = [], []
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(120):
                started = time.perf_counter()
                jobs = store.job_claim(conn, ["q"], 100, "w", 30.0)
                leased.append(time.perf_counter() - started)
                store.job_complete_many(conn, [j.claim for j in jobs])
            for _ in range(300):
                started = time.perf_counter()
                store.job_claim_held(conn, ["q"], "w", 30.0)
                held.append(time.perf_counter() - started)
                conn.commit()
        return {
            "leased_claim_100_ms": statistics.median(leased[20:]) * 1e3,
            "held_claim_1_ms": statistics.median(held[50:]) * 1e3,
        }
    finally:
        app.sync_client.drop_schema()
        app.close()


def drain(dsn: str, n: int, keyed: bool) -> float:
    schema = f"bench_slots_{secrets.token_hex(4)}"
    app = App(dsn, schema)
    app.migrate()

    @app.task(name="noop", queue="q")
    async def noop() -> None:
        return None

    try:
        _fill(dsn, schema, n, keyed)
        worker = Worker(
            app, model="held", queues=["q"], concurrency=10, burst=True, poll_interval=0.05
        )
        started = time.monotonic()
        asyncio.run(worker.run())
        return n / (time.monotonic() - started)
    finally:
        app.sync_client.drop_schema()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = default_dsn()
    parser.add_argument("--dsn", default=default)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per drain")
    args = parser.parse_args()
    figures: dict[str, float] = claims(args.dsn)
    figures["held_drain_keyed_jobs_per_s"] = drain(args.dsn, args.jobs, keyed=True)
    figures["held_drain_unkeyed_jobs_per_s"] = drain(args.dsn, args.jobs, keyed=False)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
