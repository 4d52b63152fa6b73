"""What rows of held_runs left by gone sessions cost a queue's running count, and how held-lock
sessions remove them without a leader (issue 41).

    python -m bench.held_runs_stale [--dsn DSN] [--stale N] [--reads N]

In a throwaway schema, ``--stale`` rows of sessions that are gone (as held-lock workers that
crash in a loop with no maintenance leader leave them) for the queue read; times the queue's
running count (``queue_running_count``, what every claim of a limited queue reads) ``--reads``
times, then starts held-lock sessions (each registers, removing a bounded number of those rows)
until none is left, and times the count again.  Prints one JSON line: the median count in ms
before and after, the sessions it took, and the median registration's time.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time

import psycopg

from bench.db import default_dsn
from skiplock import App
from skiplock._db.sql import Queries
from skiplock._db.store_sync import SyncStore


def count_ms(store: SyncStore, conn: psycopg.Connection, reads: int) -> float:
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        store.queue_running_count(conn, "q")
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1e3, 3)


def one_round(dsn: str, stale: int, reads: int) -> dict[str, float]:
    schema = f"bench_stale_runs_{secrets.token_hex(4)}"
    app = App(dsn, schema)
    app.migrate()
    store = SyncStore(Queries(schema))
    runs = f'"{schema}".held_runs'
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {runs} (queue, pid) SELECT 'q', -g FROM generate_series(1, %s) AS g",
                [stale],
            )
            conn.execute(f"VACUUM ANALYZE {runs}")
            before = count_ms(store, conn, reads)
            starts, register = 0, []
            while conn.execute(f"SELECT count(*) FROM {runs} WHERE pid < 0").fetchone()[0]:
                with psycopg.connect(dsn, autocommit=True) as session:
                    started = time.perf_counter()
                    store.job_claim_held(session, ["q"], "w", 30.0)  # registers; no job to run
                    register.append(time.perf_counter() - started)
                starts += 1
            conn.execute(f"VACUUM ANALYZE {runs}")
            after = count_ms(store, conn, reads)
        return {
            "stale": stale,
            "count_ms_before": before,
            "count_ms_after": after,
            "sessions_to_clear": starts,
            "session_start_claim_ms": round(statistics.median(register) * 1e3, 3),
        }
    finally:
        app.sync_client.drop_schema()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = default_dsn()
    parser.add_argument("--dsn", default=default)
    parser.add_argument("--stale", type=int, default=20_000)
    parser.add_argument("--reads", type=int, default=50)
    args = parser.parse_args()
    print(json.dumps(one_round(args.dsn, args.stale, args.reads)))


if __name__ == "__main__":
    main()
