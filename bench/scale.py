"""Scale: does the claim stay flat when the table is big?

Four tables, each with the same 10k due jobs to claim: alone; behind 1M more pending jobs; next
to 1M finished jobs; and next to 1M jobs scheduled for tomorrow at a *better* priority than the
due ones (the case the seed warns about: "SKIP LOCKED does not remove scan cost").  For each:
the server-side cost of one claim of 10 (``EXPLAIN (ANALYZE, BUFFERS)``, median of repeated
runs rolled back; the four tables exist at once, in databases of their own, and their claims
take turns statement by statement, so that the cases are compared over the same moments), the
client-side latency of claim statements (commit included), and the drain rate of a worker
started on it.  The same four tables are built for the SQL ceiling
(the seed's own table and claim), where "scheduled" can only be a pending row with a future
run_at.  The 1M background rows are written with one INSERT ... SELECT (setup, not measured);
the 10k due jobs go through skiplock's enqueue API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from psycopg import sql

from . import ceiling
from .db import BenchDatabase, connect
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


def case_context(ctx: Context, index: int) -> Context:
    """A context whose database is case ``index``'s own: the four cases' tables exist at once."""
    return replace(ctx, db=BenchDatabase(ctx.db.server_dsn, f"{ctx.db.name}_scale{index}"))


def _explain_once(conn: Any, query: Any, params: dict[str, Any]) -> tuple[float, int]:
    """Execution time (ms) and buffers of ``query`` under EXPLAIN ANALYZE, rolled back."""
    explain = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ")
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            explain + (sql.SQL(query) if isinstance(query, str) else query), params
        ).fetchone()
    plan = row[0][0] if not isinstance(row[0], str) else json.loads(row[0])[0]
    top = plan["Plan"]
    buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    return plan["Execution Time"], buffers


def explain_in_turn(
    claims: Sequence[tuple[str, Any, dict[str, Any]]], runs: int
) -> list[dict[str, float]]:
    """Median execution time and buffers of each (dsn, claim, params) under EXPLAIN ANALYZE,
    each run rolled back.  The claims take turns one statement at a time, for ``runs`` rounds
    after a warm-up round (each backend's caches), starting each round with the next one: this
    machine's speed drifts by half within a minute, and the targets compare the cases with each
    other, so each case is measured over the same moments."""
    with contextlib.ExitStack() as stack:
        conns = [stack.enter_context(connect(dsn)) for dsn, _, _ in claims]
        times: list[list[float]] = [[] for _ in claims]
        buffers: list[list[int]] = [[] for _ in claims]
        for round_ in range(runs + 1):
            for k in range(len(claims)):
                i = (round_ + k) % len(claims)
                _, query, params = claims[i]
                ms, bufs = _explain_once(conns[i], query, params)
                if round_:
                    times[i].append(ms)
                    buffers[i].append(bufs)
    return [
        {"claim_exec_ms": statistics.median(t), "claim_buffers": statistics.median(b)}
        for t, b in zip(times, buffers, strict=True)
    ]


def skiplock_setup(ctx: Context, case: str, background: int, due: int) -> None:
    """A fresh database with skiplock's schema, ``case``'s background rows, ``due`` due jobs."""
    fresh(ctx, Skiplock())
    with connect(ctx.db.dsn) as conn:
        if case in SKIPLOCK_BACKGROUND:
            conn.execute(
                "INSERT INTO skiplock.jobs (queue, task, payload, status, priority, run_at,"
                " attempts, finished_at)"
                f" SELECT 'bench', 'noop', jsonb_build_object('n', {BACKGROUND_BASE} + g),"
                f" {SKIPLOCK_BACKGROUND[case]} FROM generate_series(0, %s - 1) AS g",
                (background,),
            )
    asyncio.run(_enqueue_many(Skiplock(), ctx.db, range(due), 5000))
    with connect(ctx.db.dsn) as conn:
        conn.execute("VACUUM ANALYZE skiplock.jobs")


def skiplock_claim() -> tuple[Any, dict[str, Any]]:
    """skiplock's claim of 10 and its parameters, from the start of the index (as a worker's
    first claim: the costliest)."""
    from skiplock._db.sql import Queries

    params = {
        "queue": "bench",
        "limit": 10,
        "worker": "bench-explain",
        "lease_seconds": 30.0,
        "commit_async": True,
        "held_marker": False,
        "schema": "skiplock",
        "after_priority": None,
        "after_run_at": None,
        "after_id": None,
    }
    return Queries("skiplock")["job_claim"], params


def ceiling_setup(ctx: Context, case: str, background: int, due: int) -> None:
    """The seed's table with ``case``'s background rows and ``due`` due jobs."""
    extra = ""
    if case in CEILING_BACKGROUND:
        extra = (
            "INSERT INTO ceiling_jobs (payload, status, priority, run_at, attempts)"
            f" SELECT jsonb_build_object('n', {BACKGROUND_BASE} + g), {CEILING_BACKGROUND[case]}"
            f" FROM generate_series(0, {int(background)} - 1) AS g"
        )
    ceiling.setup(ctx.db, due, extra)


def ceiling_claim() -> tuple[Any, dict[str, Any]]:
    return ceiling.CLAIM.replace(":n", "%(n)s").replace(":w", "%(w)s"), {"n": 10, "w": "explain"}


def prepare_cases(
    system: str, ctxs: Sequence[Context], background: int, due: int, runs: int
) -> list[dict[str, float]]:
    """Build every case's table (``system`` "skiplock" or "sql-ceiling"), then measure their
    claims in turn (:func:`explain_in_turn`)."""
    setup, claim = (
        (skiplock_setup, skiplock_claim) if system == "skiplock" else (ceiling_setup, ceiling_claim)
    )
    for ctx, case in zip(ctxs, CASES, strict=True):
        setup(ctx, case, background, due)
    with connect(ctxs[0].db.dsn) as conn:
        settle(conn)
    query, params = claim()
    return explain_in_turn([(ctx.db.dsn, query, params) for ctx in ctxs], runs)


def skiplock_case(
    ctx: Context,
    case: str,
    due: int,
    claims: int,
    drain_s: float,
    setting: Setting,
) -> dict[str, Any]:
    """On a table :func:`prepare_cases` built: the client latency of ``claims`` claims of 10,
    then the drain rate of a worker."""
    from skiplock import App
    from skiplock._db.store_sync import SyncStore

    system = Skiplock()
    app = App(ctx.db.dsn, "skiplock")
    store = SyncStore(app.queries)
    lat: list[float] = []
    with connect(ctx.db.dsn) as conn:
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
        "claim_p50_ms": quantile(lat, 0.5),
        "claim_p95_ms": quantile(lat, 0.95),
        "drain_jobs_per_s": rate,
        "drained": len(starts),
        "verified": not problems,
        "problems": problems,
    }


def ceiling_case(ctx: Context, case: str, seconds: float) -> dict[str, Any]:
    """On a table :func:`prepare_cases` built: pgbench claiming 10 at a time for ``seconds``."""
    res = ceiling.run_pgbench(ctx.db, ceiling.script("done"), 10, 1, seconds=seconds)
    with connect(ctx.db.dsn) as conn:
        bad = conn.execute(
            "SELECT count(*) FROM ceiling_jobs WHERE attempts > 1 OR status = 'running'"
        ).fetchone()
    problems = [f"{bad[0]} rows claimed twice or left running"] if bad and bad[0] else []
    return {
        "case": case,
        "claim_p50_ms": res["claim_ms"],  # pgbench reports the mean per statement
        "drain_jobs_per_s": res["tps"] * 10,
        "verified": not problems,
        "problems": problems,
    }
