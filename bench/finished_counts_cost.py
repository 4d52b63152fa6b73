"""What the charts' counts cost the outcome of ``completion="delete"``: 20,000 running jobs of 4
queues deleted in batches of 100 by ``job_delete_many`` as it was before migration 0025 (the
DELETE alone), as migration 0025 made it (the DELETE and, in the same statement, its INSERT
into finished_counts) and as it is since migration 0026 (the DELETE passing its rows to
finished_counts_add, the function that holds that INSERT), the three interleaved over
``--repeat`` rounds, each first in turn (VACUUM before each); prints the min and median
milliseconds per 20,000 jobs and the ratios of the medians, of the time the client waited and,
when the server runs on this machine (its backend's /proc/PID/stat readable), of the CPU time
the server's backend spent: on a shared machine the wait grows with the load, the backend's
CPU time much less.
Figures in bench/README.md ("The charts' counts on the drain with completion delete").

    python -m bench.finished_counts_cost [--dsn postgresql://...] [--repeat 9]

It works in a schema of its own (``bench_countcost``), dropped at the end.
"""

from __future__ import annotations

import argparse
import os
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

# job_delete_many as migration 0025 made it: its own copy of the INSERT of the counts.
INLINE = sql.SQL(
    "WITH gone AS (DELETE FROM {jobs} AS j USING unnest(%(ids)s::bigint[], %(attempts)s::int[], "
    "%(claim_time_index)s::int[]) AS c(id, attempts, claim_time) WHERE j.id = c.id "
    "AND coalesce(j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(worker)s "
    "AND j.locked_at = (%(claim_times)s::timestamptz[])[c.claim_time], false) "
    "RETURNING j.id, j.queue, greatest(extract(epoch FROM j.locked_at - j.run_at), 0)::float8 "
    "AS wait), counted AS (INSERT INTO {counts} (minute, queue, done, failed, wait_sum, "
    "wait_max, buckets, counts) SELECT minute, queue, sum(done), sum(failed), sum(wait_sum), "
    "max(wait_max), array_agg(bucket ORDER BY bucket), array_agg(done + failed ORDER BY bucket) "
    "FROM (SELECT date_trunc('minute', now()) AS minute, queue, {bucket}(wait) AS bucket, "
    "count(*) AS done, 0 AS failed, sum(wait) AS wait_sum, max(wait) AS wait_max FROM gone "
    "GROUP BY 1, 2, 3) AS per_bucket GROUP BY 1, 2) SELECT id FROM gone"
).format(
    jobs=JOBS,
    counts=sql.Identifier(SCHEMA, "finished_counts"),
    bucket=sql.Identifier(SCHEMA, "finished_wait_bucket"),
)


def backend_cpu_ms(pid: int) -> float | None:
    """The CPU time (user and system) the server process ``pid`` spent, if this machine's /proc
    shows it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf("SC_CLK_TCK")


def report(what: str, times: dict[str, list[float]]) -> None:
    for name, figures in times.items():
        print(
            f"{what} {name:8} min {min(figures):7.1f}  median {statistics.median(figures):7.1f}"
            f" ms per {N:,} jobs deleted in batches of {BATCH}"
        )
    for top, bottom in (("inline", "none"), ("function", "none"), ("function", "inline")):
        ratio = statistics.median(times[top]) / statistics.median(times[bottom])
        rounds = [a / b for a, b in zip(times[top], times[bottom], strict=True)]
        print(f"{what} {top}/{bottom} medians {ratio:.2f}; round by round "
              + ", ".join(f"{r:.2f}" for r in rounds))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    app = App(args.dsn, SCHEMA)
    app.sync_client.drop_schema()  # what an interrupted run left
    app.sync_client.migrate()
    after = app.queries["job_delete_many"]
    variants = {"none": BEFORE, "inline": INLINE, "function": after}
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    try:
        with psycopg.connect(args.dsn, autocommit=True) as db:
            for round_no in range(args.repeat):
                order = list(variants.items())
                order = order[round_no % 3 :] + order[: round_no % 3]  # each goes first in turn
                for name, statement in order:
                    at: datetime = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
                    db.execute(sql.SQL("TRUNCATE {}").format(JOBS))
                    ids = [row[0] for row in db.execute(FILL, (WORKER, at, at)).fetchall()]
                    db.execute(sql.SQL("VACUUM {}").format(JOBS))
                    batches = [
                        (claim_arrays([Claim(i, 1, WORKER, at) for i in ids[k : k + BATCH]]),
                         len(ids[k : k + BATCH]))
                        for k in range(0, len(ids), BATCH)
                    ]  # fmt: skip
                    cpu_start = backend_cpu_ms(db.info.backend_pid)
                    start = time.perf_counter()
                    for params, size in batches:
                        assert len(db.execute(statement, params).fetchall()) == size, name
                    times[name].append((time.perf_counter() - start) * 1e3)
                    cpu_end = backend_cpu_ms(db.info.backend_pid)
                    if cpu_start is not None and cpu_end is not None:
                        cpu[name].append(cpu_end - cpu_start)
        report("wait", times)
        if all(cpu.values()):
            report("server CPU", cpu)
    finally:
        app.sync_client.drop_schema()


if __name__ == "__main__":
    main()
