"""What marking running held-lock jobs by row locks costs a held-lock claim (migration 0024):
one round of the tree on ``PYTHONPATH``.

    PYTHONPATH=<tree>/src python -m bench.held_runs_cost [--dsn DSN] [--jobs N]

A held-lock claim of one job, then its outcome and commit, ``--jobs`` times on one connection in
a throwaway schema (after 50 to warm up); prints one JSON line: the median wall time of the
claim and the server backend's CPU time per job, read from ``/proc`` (the server must be local
and its processes readable), which the machine's load moves less than wall time.  Compare trees
by running rounds of each in turn, e.g. the last commit's (``git archive HEAD~1 src | tar -x -C
DIR``) and this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import time

import psycopg

from bench.db import default_dsn
from skiplock import App
from skiplock._db.sql import Queries
from skiplock._db.store_sync import SyncStore

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def one_round(dsn: str, n: int) -> dict[str, float]:
    schema = f"bench_held_runs_{secrets.token_hex(4)}"
    app = App(dsn, schema)
    app.migrate()
    store = SyncStore(Queries(schema))
    jobs = f'"{schema}".jobs'
    finish = f"UPDATE {jobs} SET status = 'done', finished_at = now() WHERE id = %s"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {jobs} (queue, task, payload) "
                f"SELECT 'q', 'noop', '{{}}' FROM generate_series(1, {int(n) + 100})"
            )
            conn.execute(f"VACUUM ANALYZE {jobs}")
            pid = conn.info.backend_pid
            times = []
            for i in range(n + 50):
                if i == 50:
                    used = cpu_seconds(pid)
                started = time.perf_counter()
                job = store.job_claim_held(conn, ["q"], "w", 30.0)
                times.append(time.perf_counter() - started)
                assert job is not None
                conn.execute(finish, [job.id])
                conn.commit()
            used = cpu_seconds(pid) - used
        return {
            "claim_ms": round(statistics.median(times[50:]) * 1e3, 3),
            "backend_cpu_us_per_job": round(used / n * 1e6, 1),
        }
    finally:
        app.sync_client.drop_schema()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = default_dsn()
    parser.add_argument("--dsn", default=default)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    print(json.dumps(one_round(args.dsn, args.jobs)))


if __name__ == "__main__":
    main()
