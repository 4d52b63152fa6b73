"""Scale: does the claim stay flat when the table is big?

Four tables, each with the same 10k due jobs to claim: alone; behind 1M more pending jobs; next
to 1M finished jobs; and next to 1M jobs scheduled for tomorrow at a *better* priority than the
due ones (the case the seed warns about: "SKIP LOCKED does not remove scan cost").  For each:
the server-side cost of one claim of 10 (``EXPLAIN (ANALYZE, BUFFERS)``, median of repeated
runs rolled back), the client-side latency of claim statements (commit included), and the
drain rate of a worker started on it.  The same four tables are built for the SQL ceiling
(the seed's own table and claim), where "scheduled" can only be a pending row with a future
run_at.  The 1M background rows are written with one INSERT ... SELECT (setup, not measured);
the 10k due jobs go through skiplock's enqueue API.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from psycopg import sql

from . import ceiling
from .db import connect
from .runner import Monitor, Workers
from .systems import Setting, Skiplock
from .workloads import Context, _enqueue_many, fresh, quantile

CASES = ("due jobs only", "+1M pending", "+1M finished", "+1M future, higher priority")
BACKGROUND_BASE = 10_000_000  # job numbers of background rows, apart from the measured ones

SKIPLOCK_BACKGROUND = {
    "+1M pending": "'pending', 0, now() - interval '1 hour', 0, NULL",
    "+1M finished": "'done', 0, now() - interval '1 hour', 1, now() - interval '30 minutes'",
    "+1M future, higher priority": "'scheduled', -1, now() + interval '1 day', 0, NULL",
}
CEILING_BACKGROUND = {
    "+1M pending": "'pending', 0, now() - interval '1 hour', 0",
    "+1M finished": "'done', 0, now() - interval '1 hour', 1",
    "+1M future, higher priority": "'pending', -1, now() + interval '1 day', 0",
}


def settle(conn: Any) -> None:
    """After the setup's bulk writes: a checkpoint now, so that the one the WAL they wrote calls
    for does not write its pages out during the measurement (the cases with 1M rows would pay
    for it and the 10k case would not)."""
    conn.execute("CHECKPOINT")


def _explain_ms(conn: Any, query: str, params: dict[str, Any], runs: int) -> dict[str, float]:
    """Median execution time and buffers of ``query`` under EXPLAIN ANALYZE, each rolled back."""
    times, buffers = [], []
    for i in range(runs + 1):
        with conn.transaction(force_rollback=True):
            row = conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + sql.SQL(query)
                if isinstance(query, str)
                else sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + query,
                params,
            ).fetchone()
        plan = row[0][0] if not isinstance(row[0], str) else json.loads(row[0])[0]
        if i == 0:
            continue  # warm-up: this backend's caches
        times.append(plan["Execution Time"])
        top = plan["Plan"]
        buffers.append(top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0))
    return {"claim_exec_ms": statistics.median(times), "claim_buffers": statistics.median(buffers)}


def skiplock_case(
    ctx: Context,
    case: str,
    background: int,
    due: int,
    claims: int,
    drain_s: float,
    setting: Setting,
) -> dict[str, Any]:
    system = Skiplock()
    fresh(ctx, system)
    with connect(ctx.db.dsn) as conn:
        if case in SKIPLOCK_BACKGROUND:
            conn.execute(
                "INSERT INTO skiplock.jobs (queue, task, payload, status, priority, run_at,"
                " attempts, finished_at)"
                f" SELECT 'bench', 'noop', jsonb_build_object('n', {BACKGROUND_BASE} + g),"
                f" {SKIPLOCK_BACKGROUND[case]} FROM generate_series(0, %s - 1) AS g",
                (background,),
            )
    asyncio.run(_enqueue_many(system, ctx.db, range(due), 5000))
    with connect(ctx.db.dsn) as conn:
        conn.execute("VACUUM ANALYZE skiplock.jobs")
        settle(conn)

    from skiplock import App
    from skiplock._store_sync import SyncStore

    app = App(ctx.db.dsn, "skiplock")
    store = SyncStore(app.queries)
    params = {
        "queue": "bench",
        "limit": 10,
        "worker": "bench-explain",
        "lease_seconds": 30.0,
        "commit_async": True,
        # From the start of the index, as a worker's first claim (the costliest).
        "after_priority": None,
        "after_run_at": None,
        "after_id": None,
    }
    lat: list[float] = []
    with connect(ctx.db.dsn) as conn:
        out = _explain_ms(conn, app.queries["job_claim"], params, 31 if claims > 50 else 5)
        for _ in range(claims):
            t0 = time.perf_counter()
            jobs = store.job_claim(conn, ["bench"], 10, "bench-claims", 30.0)
            lat.append((time.perf_counter() - t0) * 1000)
            store.job_finish_many(conn, [j.claim for j in jobs], "keep")
    app.close()
    claimed = claims * 10

    # Drain rate: a worker on the same table for drain_s seconds (or until the due jobs ran).
    workers = Workers(system, setting, ctx.db, ctx.log_dir)
    mon = Monitor(ctx.db, workers.pids, system.unfinished_sql)
    problems: list[str] = []
    try:
        workers.start()
        deadline = time.monotonic() + drain_s + 3.0  # + start-up
        finished = False
        while time.monotonic() < deadline:
            if not mon.sample().probe:
                finished = True
                break
            time.sleep(0.05)
        workers.stop()
        numbers, starts = workers.records()
        dupes = len(numbers) - len(set(numbers))
        if dupes:
            problems.append(f"{dupes} jobs ran more than once")
        if case != "+1M pending":
            expected = set(range(claimed, due))
            if not set(numbers) <= expected:
                problems.append("the worker ran jobs the bench had already claimed")
            if finished and set(numbers) != expected:
                problems.append(f"{len(expected - set(numbers))} due jobs never ran")
        failed = mon.execute(
            "SELECT count(*) FROM skiplock.jobs WHERE attempts > 1 OR status = 'failed'"
        )[0]
        if failed:
            problems.append(f"{failed} jobs claimed more than once or failed")
        span = (max(starts) - min(starts)) if len(starts) > 1 else 0.0
        rate = (len(starts) - 1) / span if span > 0 else float("nan")
    finally:
        workers.stop(timeout=5)
        workers.cleanup()
        mon.close()
    return {
        "case": case,
        **out,
        "claim_p50_ms": quantile(lat, 0.5),
        "claim_p95_ms": quantile(lat, 0.95),
        "drain_jobs_per_s": rate,
        "drained": len(starts),
        "verified": not problems,
        "problems": problems,
    }


def ceiling_case(
    ctx: Context, case: str, background: int, due: int, seconds: float
) -> dict[str, Any]:
    extra = ""
    if case in CEILING_BACKGROUND:
        extra = (
            "INSERT INTO ceiling_jobs (payload, status, priority, run_at, attempts)"
            f" SELECT jsonb_build_object('n', {BACKGROUND_BASE} + g), {CEILING_BACKGROUND[case]}"
            f" FROM generate_series(0, {int(background)} - 1) AS g"
        )
    ceiling.setup(ctx.db, due, extra)
    with connect(ctx.db.dsn) as conn:
        settle(conn)
    claim_sql = ceiling.CLAIM.replace(":n", "%(n)s").replace(":w", "%(w)s")
    with connect(ctx.db.dsn) as conn:
        out = _explain_ms(conn, claim_sql, {"n": 10, "w": "explain"}, 31 if seconds > 2 else 5)
    res = ceiling.run_pgbench(ctx.db, ceiling.script("done"), 10, 1, seconds=seconds)
    with connect(ctx.db.dsn) as conn:
        bad = conn.execute(
            "SELECT count(*) FROM ceiling_jobs WHERE attempts > 1 OR status = 'running'"
        ).fetchone()
    problems = [f"{bad[0]} rows claimed twice or left running"] if bad and bad[0] else []
    return {
        "case": case,
        **out,
        "claim_p50_ms": res["claim_ms"],  # pgbench reports the mean per statement
        "drain_jobs_per_s": res["tps"] * 10,
        "verified": not problems,
        "problems": problems,
    }
