"""What migration 0025's counts cost the outcome of ``completion="delete"``: 20,000 running jobs
of 4 queues deleted in batches of 100 by ``job_delete_many`` as it was (the DELETE alone) and
as it is (the DELETE and, in the same statement, the INSERT of its counts into
finished_counts), the two interleaved over ``--repeat`` rounds (VACUUM before each); prints
the min and median milliseconds per 20,000 jobs and the ratio of the medians.  Figures in
bench/README.md ("The charts' counts on the drain with completion delete").

    python -m bench.finished_counts_cost [--dsn postgresql://...] [--repeat 9]

It works in a schema of its own (``bench_countcost``), dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime

import psycopg
from psycopg import sql

from bench.db import default_dsn
from skiplock import App, Claim
from skiplock._db.statement_params import claim_arrays

SCHEMA = "bench_countcost"
JOBS = sql.Identifier(SCHEMA, "jobs")
N, BATCH, WORKER = 20_000, 100, "bench-worker"
FILL = sql.SQL(
    "INSERT INTO {jobs} (queue, task, payload, status, attempts, locked_by, "
    "locked_at, locked_until, run_at) SELECT 'q' || (g %% 4), 't', jsonb_build_object('n', g), "
    "'running', 1, %s, %s, now() + interval '1 hour', %s - (g %% 50) * interval '10 ms' "
    "FROM generate_series(1, {n}) AS g RETURNING id"
).format(jobs=JOBS, n=sql.Literal(N))
# job_delete_many before migration 0025.
BEFORE = sql.SQL(
    "DELETE FROM {jobs} AS j USING unnest(%(ids)s::bigint[], %(attempts)s::int[], "
    "%(claim_time_index)s::int[]) AS c(id, attempts, claim_time) WHERE j.id = c.id "
    "AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s "
    "AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false) RETURNING j.id"
).format(jobs=JOBS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    app = App(args.dsn, SCHEMA)
    app.sync_client.drop_schema()  # what an interrupted run left
    app.sync_client.migrate()
    after = app.queries["job_delete_many"]
    times: dict[str, list[float]] = {"before": [], "after": []}
    try:
        with psycopg.connect(args.dsn, autocommit=True) as db:
            for _ in range(args.repeat):
                for name, statement in (("before", BEFORE), ("after", after)):
                    at: datetime = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
                    db.execute(sql.SQL("TRUNCATE {}").format(JOBS))
                    ids = [row[0] for row in db.execute(FILL, (WORKER, at, at)).fetchall()]
                    db.execute(sql.SQL("VACUUM {}").format(JOBS))
                    batches = [
                        (claim_arrays([Claim(i, 1, WORKER, at) for i in ids[k : k + BATCH]]),
                         len(ids[k : k + BATCH]))
                        for k in range(0, len(ids), BATCH)
                    ]  # fmt: skip
                    start = time.perf_counter()
                    for params, size in batches:
                        assert len(db.execute(statement, params).fetchall()) == size, name
                    times[name].append((time.perf_counter() - start) * 1e3)
        for name, figures in times.items():
            print(
                f"{name:7} min {min(figures):7.1f}  median {statistics.median(figures):7.1f}"
                f" ms per {N:,} jobs deleted in batches of {BATCH}"
            )
        ratio = statistics.median(times["after"]) / statistics.median(times["before"])
        rounds = [a / b for a, b in zip(times["after"], times["before"], strict=True)]
        print(f"after/before medians {ratio:.2f}; round by round "
              + ", ".join(f"{r:.2f}" for r in rounds))  # fmt: skip
    finally:
        app.sync_client.drop_schema()


if __name__ == "__main__":
    main()
