# ruff: noqa: RUF001  (the report is Markdown for people: typographic dashes and signs are meant)
"""RESULTS.md and the charts, from the list of runs ``python -m bench`` collected."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .apps.work import KINDS
from .db import BenchDatabase, connect
from .plan import Plan
from .scale import CASES

CELERY = ("celery-redis", "celery-rabbitmq")
DRAMATIQ = ("dramatiq-redis", "dramatiq-rabbitmq")
PEERS = ("pgqueuer", "procrastinate", *CELERY, *DRAMATIQ)
COLORS = {
    "celery-redis": "#d62728",
    "celery-rabbitmq": "#9467bd",
    "dramatiq-redis": "#8c564b",
    "dramatiq-rabbitmq": "#e377c2",
    "skiplock": "#1f77b4",
    "pgqueuer": "#ff7f0e",
    "procrastinate": "#2ca02c",
    "sql-ceiling": "#7f7f7f",
    "sql-floor": "#7f7f7f",
}


def commit_latency(db: BenchDatabase, commits: int = 200) -> float:
    """Mean ms of a one-row INSERT commit on this server now (fsync cost: what batching saves)."""
    db.recreate()
    with connect(db.dsn) as conn:
        conn.execute("CREATE TABLE commit_probe (a int)")
        t0 = time.perf_counter()
        for _ in range(commits):
            conn.execute("INSERT INTO commit_probe VALUES (1)")
        return (time.perf_counter() - t0) * 1000 / commits


def plan_dict(plan: Plan) -> dict[str, Any]:
    return dataclasses.asdict(plan)


# -- aggregation ----------------------------------------------------------------------------


def select(results: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in results if all(r.get(k) == v for k, v in match.items())]


def stats(rows: Iterable[dict[str, Any]], metric: str) -> tuple[float, float, float] | None:
    """Median, min, max of ``metric`` over the runs whose counts verified (the others are
    listed at the end of the report, not averaged in)."""
    rows = [r for r in rows if r.get("verified")]
    values = [
        r[metric]
        for r in rows
        if isinstance(r.get(metric), int | float)
        and not (isinstance(r[metric], float) and math.isnan(r[metric]))
    ]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def med(rows: Iterable[dict[str, Any]], metric: str) -> float:
    s = stats(rows, metric)
    return s[0] if s else float("nan")


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fmt_stats(s: tuple[float, float, float] | None, digits: int = 3) -> str:
    if s is None:
        return "–"
    m, lo, hi = s
    if lo == hi:
        return fmt(m, digits)
    return f"{fmt(m, digits)} ({fmt(lo, digits)}–{fmt(hi, digits)})"


def groups(rows: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[tuple(r.get(k) for k in keys)].append(r)
    return dict(out)


def verified(rows: list[dict[str, Any]]) -> str:
    ok = sum(1 for r in rows if r.get("verified"))
    return "yes" if ok == len(rows) else f"**{ok}/{len(rows)}**"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# -- figures the targets use ----------------------------------------------------------------


def best_setting(
    results: list[dict[str, Any]],
    workload: str,
    systems: Iterable[str],
    *,
    exposure_at_most: float | None = None,
    **match: Any,
) -> tuple[str, str, float] | None:
    """(system, setting, median jobs/s) of the fastest setting among ``systems``; with
    ``exposure_at_most``, only settings whose crash exposure (median max claimed-unrecorded) is
    no larger."""
    best = None
    for (system, setting), rows in groups(
        select(results, workload=workload, **match), "system", "setting"
    ).items():
        if system not in systems:
            continue
        if exposure_at_most is not None and not med(rows, "max_inflight") <= exposure_at_most:
            continue  # larger, or not measured (NaN compares false)
        m = med(rows, "jobs_per_s")
        if not math.isnan(m) and (best is None or m > best[2]):
            best = (system, setting, m)
    return best


def nearest_batch(results: list[dict[str, Any]], jobs: float) -> int:
    """The ceiling's batch size closest to ``jobs`` on a log scale."""
    seed = select(results, workload="ceiling", system="sql-ceiling")
    batches = sorted({int(r["batch"]) for r in seed}) or [10]
    return min(batches, key=lambda b: abs(math.log(b) - math.log(max(jobs, 1.0))))


def ceiling_best(
    results: list[dict[str, Any]], batch: int, mode: str = "done", size: int | None = None
) -> float:
    """The ceiling's best (over client counts) median jobs/s at ``batch`` and ``mode``; with
    ``size``, as measured between the repetitions of that drain size, where it was."""
    rows = []
    if size is not None:
        rows = select(
            results, workload="drain-ceiling", system="sql-ceiling", batch=batch, mode=mode,
            size=size,
        )  # fmt: skip
    if not rows:
        rows = select(results, workload="ceiling", system="sql-ceiling", batch=batch, mode=mode)
    by = groups(rows, "clients")
    return max((med(r, "jobs_per_s") for r in by.values()), default=float("nan"))


def cpu_bound(rows: list[dict[str, Any]], cpus: int | None) -> tuple[float, float, float] | None:
    """(jobs/s, worker CPU µs/job, PG CPU µs/job): the most a drain could reach if every core
    of the machine did nothing but this drain at the CPU per job it was measured to cost
    (worker and PostgreSQL share the cores); None where that was not measured."""
    worker, pg = med(rows, "worker_cpu_us_per_job"), med(rows, "pg_cpu_us_per_job")
    if not cpus or math.isnan(worker) or math.isnan(pg) or worker + pg <= 0:
        return None
    return cpus * 1e6 / (worker + pg), worker, pg


def ceiling_alongside(results: list[dict[str, Any]], size: int, batch: int) -> bool:
    return bool(select(results, workload="drain-ceiling", size=size, batch=batch))


CEILING_WITHIN = 1.5  # a drain is to take at most this many times as long as the SQL ceiling
SYNC_WITHIN = 0.8  # a sync task's drain against the same task's as an async def
SYNC_TWINS = (("sync", "default"), ("x2-sync", "x2"))


def celery_targets(results: list[dict[str, Any]]) -> list[list[str]]:
    """Issue 48's targets against Celery: skiplock's default drain ≥ 2x Celery's best setting;
    its enqueue → start p50 ≤ 1.1x and p99 ≤ 1.5x Celery on Redis's."""
    out: list[list[str]] = []
    for size in sorted({r["size"] for r in select(results, workload="drain")}):
        best = best_setting(results, "drain", CELERY, size=size)
        sk = med(
            select(results, workload="drain", system="skiplock", setting="default", size=size),
            "jobs_per_s",
        )
        if best and not math.isnan(sk):
            r = sk / best[2]
            out.append(
                [
                    f"Drain {size:,}: skiplock default ≥ 2× the best Celery setting",
                    f"{fmt(sk)} vs {fmt(best[2])} jobs/s ({best[0]} {best[1]}) = {r:.2f}×",
                    verdict(r >= 2.0),
                ]
            )
    sk_rows = select(results, workload="latency", system="skiplock", setting="default")
    cr_rows = select(results, workload="latency", system="celery-redis")
    if sk_rows and cr_rows:
        for q, need in (("p50", 1.1), ("p99", 1.5)):
            sk, cr = med(sk_rows, f"{q}_ms"), med(cr_rows, f"{q}_ms")
            out.append(
                [
                    f"Latency {q} ≤ {need}× Celery on Redis's",
                    f"{fmt(sk)} vs {fmt(cr)} ms = {sk / cr:.2f}×",
                    verdict(sk / cr <= need),
                ]
            )
    return out


UNDERLOAD_P99_MS = 25.0  # under load: a higher-priority job, and the other queue's, start within


def underload_targets(results: list[dict[str, Any]]) -> list[list[str]]:
    """Issue 48, item 4: while a backlog drains, skiplock's higher-priority job on the busy
    queue and its job on the other queue both start within 25 ms p99 (default worker)."""
    rows = select(results, workload="underload", system="skiplock", setting="default")
    out: list[list[str]] = []
    for kind, what in (("urgent", "a higher-priority job"), ("other", "the other queue's job")):
        p99 = med(rows, f"{kind}_p99_ms")
        if not math.isnan(p99):
            out.append(
                [
                    f"Under load: {what} starts within {UNDERLOAD_P99_MS:.0f} ms p99",
                    f"{fmt(p99)} ms (p50 {fmt(med(rows, f'{kind}_p50_ms'))} ms)",
                    verdict(p99 <= UNDERLOAD_P99_MS),
                ]
            )
    return out


WORK_EFFICIENCY = 0.9  # real work, I/O rows: skiplock's jobs/s at least this share of the ideal


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**missed**")


def targets(results: list[dict[str, Any]], plan: Plan, cpus: int | None = None) -> list[list[str]]:
    """The issue's targets as table rows (target, figure, verdict); ``cpus``, the machine's,
    adds to each ceiling target the drain's CPU bound (:func:`cpu_bound`)."""
    out: list[list[str]] = []
    sizes = sorted({r["size"] for r in select(results, workload="drain")})
    for size in sizes:
        pq = best_setting(results, "drain", ["pgqueuer"], size=size)
        sk_default = med(
            select(results, workload="drain", system="skiplock", setting="default", size=size),
            "jobs_per_s",
        )
        sk = best_setting(results, "drain", ["skiplock"], size=size)
        if pq:
            r = sk_default / pq[2]
            out.append(
                [
                    f"Drain {size:,}: skiplock default ≥ 1.0× PGQueuer best",
                    f"{fmt(sk_default)} vs {fmt(pq[2])} jobs/s ({pq[1]}) = {r:.2f}×",
                    verdict(r >= 1.0),
                ]
            )
        if pq and sk:
            exp_pq = med(
                select(results, workload="drain", system="pgqueuer", setting=pq[1], size=size),
                "max_inflight",
            )
            # skiplock's best with a crash exposure no larger than PGQueuer's: the fastest of
            # its settings within that exposure (else its fastest, which then misses).
            safe = best_setting(results, "drain", ["skiplock"], size=size, exposure_at_most=exp_pq)
            best = safe or sk
            exp_sk = med(
                select(results, workload="drain", system="skiplock", setting=best[1], size=size),
                "max_inflight",
            )
            r = best[2] / pq[2]
            note = ""
            if best != sk:
                note = f" (fastest overall: {sk[1]} {fmt(sk[2])}, max claimed-unrecorded larger)"
            out.append(
                [
                    f"Drain {size:,}: skiplock best with a crash exposure ≤ PGQueuer's "
                    "≥ 1.3× PGQueuer best",
                    f"{best[1]} {fmt(best[2])} vs {pq[1]} {fmt(pq[2])} jobs/s = {r:.2f}×; "
                    f"max claimed-unrecorded {fmt(exp_sk)} vs {fmt(exp_pq)}{note}",
                    verdict(r >= 1.3 and exp_sk <= exp_pq),
                ]
            )
        for sync_label, async_label in SYNC_TWINS:
            sync_rate = med(
                select(results, workload="drain", system="skiplock", setting=sync_label, size=size),
                "jobs_per_s",
            )
            async_rate = med(
                select(
                    results, workload="drain", system="skiplock", setting=async_label, size=size
                ),
                "jobs_per_s",
            )
            if not (math.isnan(sync_rate) or math.isnan(async_rate)):
                r = sync_rate / async_rate
                out.append(
                    [
                        f"Drain {size:,}: skiplock {sync_label} (the task a plain def) ≥ "
                        f"{SYNC_WITHIN}× {async_label} (async def)",
                        f"{fmt(sync_rate)} vs {fmt(async_rate)} jobs/s = {r:.2f}×",
                        verdict(r >= SYNC_WITHIN),
                    ]
                )
        for setting in (
            s for s in plan.drain_settings if s.system == "skiplock" and s.handler == "async"
        ):
            label = setting.label
            # A setting that deletes finished jobs is held to the ceiling that deletes them.
            mode = "delete" if setting.completion == "delete" else "done"
            sk_rate = med(
                select(results, workload="drain", system="skiplock", setting=label, size=size),
                "jobs_per_s",
            )
            # The ceiling at the batch size skiplock actually ran: a ceiling job costs two
            # transactions (claim, finish), so skiplock's batch is twice its jobs per
            # transaction; the nearest measured batch on a log scale.
            xacts = med(
                select(results, workload="drain", system="skiplock", setting=label, size=size),
                "xacts_per_job",
            )
            per_pair = 2 / xacts if xacts and not math.isnan(xacts) else 10.0
            batch = nearest_batch(results, per_pair)
            ceil = ceiling_best(results, batch, mode, size)
            when = (
                ", measured between the drains" if ceiling_alongside(results, size, batch) else ""
            )
            tried = select(results, workload="drain", system="skiplock", setting=label, size=size)
            if tried and math.isnan(sk_rate):
                out.append(
                    [
                        f"Drain {size:,}: skiplock {label} within {CEILING_WITHIN}× of the SQL "
                        "ceiling",
                        "no run of this setting completed with verified counts (see the end)",
                        verdict(False),
                    ]
                )
                continue
            if math.isnan(sk_rate) or math.isnan(ceil):
                continue
            r = ceil / sk_rate
            figure = f"ceiling {fmt(ceil)} / skiplock {fmt(sk_rate)} = {r:.2f}×"
            bound = cpu_bound(tried, cpus)
            if bound:
                figure += (
                    f"; CPU bound {fmt(bound[0])} jobs/s ({cpus} cores ÷ {fmt(bound[1])} + "
                    f"{fmt(bound[2])} µs of worker + PG CPU per job), the target needs "
                    f"{fmt(ceil / CEILING_WITHIN)}"
                )
            out.append(
                [
                    f"Drain {size:,}: skiplock {label} within {CEILING_WITHIN}× of the SQL ceiling "
                    f"(batch {batch}, the nearest to skiplock's {per_pair:.0f} jobs per claim + "
                    f"write; {'mark done' if mode == 'done' else 'delete'}, best of 1–8 "
                    f"clients{when})",
                    figure,
                    verdict(r <= CEILING_WITHIN),
                ]
            )
    for mode, need in (("bulk", 1.5), ("single", 1.0)):
        sk = med(select(results, workload="enqueue", system="skiplock", setting=mode), "jobs_per_s")
        pq = med(select(results, workload="enqueue", system="pgqueuer", setting=mode), "jobs_per_s")
        if not (math.isnan(sk) or math.isnan(pq)):
            out.append(
                [
                    f"Enqueue {mode}: ≥ {need}× PGQueuer",
                    f"{fmt(sk)} vs {fmt(pq)} jobs/s = {sk / pq:.2f}×",
                    verdict(sk / pq >= need),
                ]
            )
    out += celery_targets(results)
    out += underload_targets(results)
    sk_rows = select(results, workload="latency", system="skiplock", setting="default")
    pq_rows = select(results, workload="latency", system="pgqueuer")
    if sk_rows and pq_rows:
        sk50, pq50, sk99 = med(sk_rows, "p50_ms"), med(pq_rows, "p50_ms"), med(sk_rows, "p99_ms")
        figure = f"{fmt(sk50)} vs {fmt(pq50)} ms = {sk50 / pq50:.2f}×"
        floor = med(select(results, workload="latency", system="sql-floor"), "p50_ms")
        if not math.isnan(floor):
            figure += (
                f"; raw-SQL floor {fmt(floor)} ms: overhead over it {fmt(sk50 - floor)} vs "
                f"{fmt(pq50 - floor)} ms"
            )
        out.append(["Latency p50 ≤ 0.7× PGQueuer p50", figure, verdict(sk50 / pq50 <= 0.7)])
        out.append(["Latency p99 ≤ 10 ms (idle worker)", f"{fmt(sk99)} ms", verdict(sk99 <= 10)])
    base_rows = select(results, workload="scale", system="skiplock", case=CASES[0])
    if base_rows:
        base = med(base_rows, "claim_exec_ms")
        base_client = med(base_rows, "claim_p50_ms")
        for case in CASES[1:]:
            rows = select(results, workload="scale", system="skiplock", case=case)
            if not rows:
                continue
            m, c = med(rows, "claim_exec_ms"), med(rows, "claim_p50_ms")
            out.append(
                [
                    f"Scale ({case.replace('+1M', f'+{plan.scale_background:,}')}): "
                    f"claim ≤ 1.5× the {plan.scale_due:,}-due-jobs-only case",
                    f"server {fmt(m)} vs {fmt(base)} ms = {m / base:.2f}×; "
                    f"client p50 {fmt(c)} vs {fmt(base_client)} ms = {c / base_client:.2f}×",
                    verdict(m / base <= 1.5),
                ]
            )
    for (kind, _), rows in groups(
        select(results, workload="work", system="skiplock"), "kind", "setting"
    ).items():
        if kind not in ("async-io", "sync-io"):
            continue
        eff = med(rows, "efficiency")
        floor = med(select(results, workload="work", system="no-queue", kind=kind), "efficiency")
        out.append(
            [
                f"Real work, {kind}: skiplock ≥ {WORK_EFFICIENCY:.0%} of the ideal",
                f"{fmt(med(rows, 'jobs_per_s'))} vs {fmt(rows[0]['ideal_jobs_per_s'])} jobs/s "
                f"({rows[0]['setting']}) = {eff:.0%}"
                + ("" if math.isnan(floor) else f"; the same work with no queue: {floor:.0%}"),
                verdict(eff >= WORK_EFFICIENCY),
            ]
        )
    rows = select(results, workload="longtx", system="skiplock")
    if rows:
        r = med(rows, "during_over_before")
        during = plan.longtx[1]
        out.append(
            [
                f"Long transaction ({during:.0f} s held snapshot): throughput ≥ 50% of clean",
                f"{fmt(med(rows, 'during_jobs_per_s'))} vs "
                f"{fmt(med(rows, 'before_jobs_per_s'))} jobs/s = {r:.0%}",
                verdict(r >= 0.5),
            ]
        )
    return out


# -- sections -------------------------------------------------------------------------------

COST_HEADER = ["xacts/job", "WAL B/job", "worker CPU µs/job", "PG CPU µs/job"]


def cost_cells(rows: list[dict[str, Any]]) -> list[str]:
    return [
        fmt(med(rows, "xacts_per_job")),
        fmt(med(rows, "wal_bytes_per_job"), 4),
        fmt(med(rows, "worker_cpu_us_per_job")),
        fmt(med(rows, "pg_cpu_us_per_job")),
    ]


def statements_cell(results: list[dict[str, Any]], system: str, setting: str) -> str:
    """Statements per job from the same setting's counted drain (see statements_section)."""
    rows = select(results, workload="statements", system=system, setting=setting)
    return fmt(med(rows, "statements_per_job")) if rows and verified(rows) == "yes" else "–"


def statements_section(results: list[dict[str, Any]], plan: Plan) -> str:
    rows = select(results, workload="statements")
    if not rows:
        return "Not measured in this run."
    about = (
        "PostgreSQL counts statements only with `pg_stat_statements`, a preload library that "
        "needs a server restart. So each setting drains once more "
        f"({plan.statements_jobs:,} jobs; Procrastinate {plan.procrastinate_drain:,}) with its "
        "workers connected through `bench/wire.py`, a proxy that forwards every byte and reads "
        "the type of each message the clients send. Statements = simple queries (`Q`) + "
        "executes (`E`), `BEGIN`/`COMMIT` included; round trips = simple queries + syncs (`S`). "
        "Counted over the workers' whole life (start-up, polls, leadership, shutdown), divided by "
        "the jobs. These drains' speeds are the proxy's, not reported."
    )
    lines = [
        [
            system,
            setting,
            f"{rs[0].get('jobs', 0):,}",
            fmt(med(rs, "statements_per_job")),
            fmt(med(rs, "round_trips_per_job")),
            fmt(med(rs, "bytes_to_server_per_job")),
            fmt(med(rs, "bytes_to_client_per_job")),
            fmt(med(rs, "connections")),
            fmt(med(rs, "xacts_per_job")),
            verified(rs),
        ]
        for (system, setting), rs in groups(rows, "system", "setting").items()
    ]
    head = [
        "system",
        "setting",
        "jobs",
        "statements/job",
        "round trips/job",
        "B to server/job",
        "B to client/job",
        "connections",
        "xacts/job",
        "verified",
    ]
    return f"{about}\n\n{table(head, lines)}"


def drain_section(results: list[dict[str, Any]]) -> str:
    parts = []
    for size in sorted({r["size"] for r in select(results, workload="drain")}):
        rows = select(results, workload="drain", size=size)
        peer = best_setting(results, "drain", PEERS, size=size)
        lines = []
        for (system, setting), rs in groups(rows, "system", "setting").items():
            m = med(rs, "jobs_per_s")
            ratio = f"{m / peer[2]:.2f}×" if peer and not math.isnan(m) else "–"
            jobs = rs[0].get("jobs", size)
            lines.append(
                [
                    system,
                    setting,
                    rs[0].get("notes", ""),
                    f"{jobs:,}" if isinstance(jobs, int) else "–",
                    fmt_stats(stats(rs, "jobs_per_s")),
                    ratio,
                    fmt(med(rs, "max_inflight")),
                    statements_cell(results, system, setting),
                    *cost_cells(rs),
                    fmt(med(rs, "startup_s")),
                    verified(rs),
                ]
            )
        head = [
            "system",
            "setting",
            "what",
            "jobs",
            "jobs/s median (min–max)",
            "vs best peer",
            "max claimed-unrecorded",
            "statements/job",
            *COST_HEADER,
            "start-up s",
            "verified",
        ]
        best = f"best peer: {peer[0]} {peer[1]} ({fmt(peer[2])} jobs/s)" if peer else ""
        parts.append(f"### Drain, {size:,} jobs preloaded ({best})\n\n{table(head, lines)}")
        alongside = select(results, workload="drain-ceiling", size=size)
        if alongside:
            figures = []
            for (batch, mode), rs in groups(alongside, "batch", "mode").items():
                by = groups(rs, "clients")  # keyed by 1-tuples
                each = ", ".join(
                    f"{key[0]} client{'s' if key[0] != 1 else ''} {fmt(med(by[key], 'jobs_per_s'))}"
                    for key in sorted(by)
                )
                figures.append(f"batch {batch}, {mode}: {each}")
            parts.append(
                "The SQL ceiling measured after each repetition of these drains (pgbench, jobs/s, "
                "median; the targets compare with these): " + "; ".join(figures) + "."
            )
    return "\n\n".join(parts)


SYSTEM_ORDER = ("skiplock", "pgqueuer", "procrastinate", *CELERY, *DRAMATIQ, "no-queue")


def work_section(results: list[dict[str, Any]], cpus: int | None) -> str:
    """Real work: each setting's jobs/s against its ideal, the best peer of the same kind, and
    the CPU bound (cores ÷ the worker's and its backends' CPU per job)."""
    rows = select(results, workload="work")
    if not rows:
        return "Not measured in this run."
    grouped = groups(rows, "kind", "system", "setting")
    lines = []
    for kind, system, setting in sorted(
        grouped,
        key=lambda k: (
            KINDS.index(k[0]) if k[0] in KINDS else 99,
            SYSTEM_ORDER.index(k[1]) if k[1] in SYSTEM_ORDER else 99,
        ),
    ):
        rs = grouped[(kind, system, setting)]
        m = med(rs, "jobs_per_s")
        peer = best_setting(results, "work", PEERS, kind=kind)
        cpu = med(rs, "worker_cpu_us_per_job") + med(rs, "pg_cpu_us_per_job")
        bound = cpus * 1e6 / cpu if cpus and cpu > 0 else float("nan")
        jobs = rs[0].get("jobs", rs[0].get("size"))
        lines.append(
            [
                kind,
                system,
                setting,
                rs[0].get("notes", ""),
                f"{jobs:,}" if isinstance(jobs, int) else "–",
                fmt_stats(stats(rs, "jobs_per_s")),
                fmt(rs[0].get("ideal_jobs_per_s")),
                f"{med(rs, 'efficiency'):.0%}" if not math.isnan(m) else "–",
                f"{m / peer[2]:.2f}×" if peer and not math.isnan(m) else "–",
                fmt(bound),
                fmt(med(rs, "worker_cpu_us_per_job")),
                fmt(med(rs, "pg_cpu_us_per_job")),
                fmt(med(rs, "max_inflight")),
                verified(rs),
            ]
        )
    head = [
        "work",
        "system",
        "setting",
        "what",
        "jobs",
        "jobs/s median (min–max)",
        "ideal jobs/s",
        "of ideal",
        "vs best peer",
        "CPU bound jobs/s",
        "worker CPU µs/job",
        "PG CPU µs/job",
        "max claimed-unrecorded",
        "verified",
    ]
    return table(head, lines)


def ceiling_section(results: list[dict[str, Any]], system: str = "sql-ceiling") -> str:
    """The pgbench runs of ``system``'s statements; skiplock's own also as a ratio to the
    seed's at the same batch size, finish and clients."""
    rows = select(results, workload="ceiling", system=system)
    own = system != "sql-ceiling"
    lines = []
    for (batch, mode, clients), rs in sorted(groups(rows, "batch", "mode", "clients").items()):
        line = [str(batch), mode, str(clients), fmt_stats(stats(rs, "jobs_per_s"))]
        if own:
            seed = select(
                results,
                workload="ceiling",
                system="sql-ceiling",
                batch=batch,
                mode=mode,
                clients=clients,
            )
            ratio = med(rs, "jobs_per_s") / med(seed, "jobs_per_s") if seed else float("nan")
            line.append("–" if math.isnan(ratio) else f"{ratio:.2f}×")
        lines.append(
            [
                *line,
                fmt(med(rs, "claim_ms")),
                fmt(med(rs, "finish_ms")),
                fmt(med(rs, "xacts_per_job")),
                fmt(med(rs, "wal_bytes_per_job"), 4),
                fmt(med(rs, "pg_cpu_us_per_job")),
                fmt(med(rs, "client_cpu_us_per_job")),
                verified(rs),
            ]
        )
    head = [
        "jobs/statement",
        "finish",
        "clients",
        "jobs/s median (min–max)",
        "claim ms",
        "finish ms",
        "xacts/job",
        "WAL B/job",
        "PG CPU µs/job",
        "pgbench CPU µs/job",
        "verified",
    ]
    if own:
        head.insert(4, "vs the seed's")
    return table(head, lines)


def enqueue_section(results: list[dict[str, Any]]) -> str:
    rows = select(results, workload="enqueue")
    lines = []
    for mode in ("single", "bulk"):
        peer = best_setting(results, "enqueue", PEERS, setting=mode)
        for (system,), rs in groups(select(rows, setting=mode), "system").items():
            m = med(rs, "jobs_per_s")
            lines.append(
                [
                    mode,
                    system,
                    f"{rs[0].get('jobs', 0):,}",
                    fmt_stats(stats(rs, "jobs_per_s")),
                    f"{m / peer[2]:.2f}×" if peer else "–",
                    fmt(med(rs, "xacts_per_job")),
                    fmt(med(rs, "wal_bytes_per_job"), 4),
                    fmt(med(rs, "client_cpu_us_per_job")),
                    fmt(med(rs, "pg_cpu_us_per_job")),
                    verified(rs),
                ]
            )
    head = [
        "mode",
        "system",
        "jobs",
        "jobs/s median (min–max)",
        "vs best peer",
        "xacts/job",
        "WAL B/job",
        "client CPU µs/job",
        "PG CPU µs/job",
        "verified",
    ]
    return table(head, lines)


def latency_section(results: list[dict[str, Any]]) -> str:
    rows = select(results, workload="latency")
    peers = [med(rs, "p50_ms") for (s,), rs in groups(rows, "system").items() if s in PEERS]
    best_peer = min((p for p in peers if not math.isnan(p)), default=float("nan"))
    lines = []
    for (system, setting), rs in groups(rows, "system", "setting").items():
        p50 = med(rs, "p50_ms")
        lines.append(
            [
                system,
                setting,
                fmt_stats(stats(rs, "p50_ms")),
                fmt_stats(stats(rs, "p95_ms")),
                fmt_stats(stats(rs, "p99_ms")),
                fmt(med(rs, "max_ms")),
                f"{p50 / best_peer:.2f}×",
                fmt(med(rs, "worker_cpu_us_per_job")),
                fmt(med(rs, "pg_cpu_us_per_job")),
                verified(rs),
            ]
        )
    head = [
        "system",
        "setting",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "p50 vs best peer",
        "worker CPU µs/job",
        "PG CPU µs/job",
        "verified",
    ]
    return table(head, lines)


def underload_section(results: list[dict[str, Any]]) -> str:
    """Latency under load: per system and setting, the backlog's drain rate and each trickled
    kind's enqueue → start while it drained, with the ratio of its p50 and p99 to skiplock's."""
    rows = select(results, workload="underload")
    if not rows:
        return "Not measured in this run."
    grouped = groups(rows, "system", "setting")
    sk = select(rows, system="skiplock", setting="default")
    lines = []
    for (system, setting), rs in sorted(
        grouped.items(),
        key=lambda kv: SYSTEM_ORDER.index(kv[0][0]) if kv[0][0] in SYSTEM_ORDER else 99,
    ):
        cells = [
            system,
            setting,
            rs[0].get("notes", ""),
            f"{rs[0].get('jobs', 0):,}",
            fmt_stats(stats(rs, "backlog_jobs_per_s")),
        ]
        for kind in ("urgent", "other"):
            p50, p99 = med(rs, f"{kind}_p50_ms"), med(rs, f"{kind}_p99_ms")
            if math.isnan(p50):
                cells += ["–", "–"]
                continue
            s50, s99 = med(sk, f"{kind}_p50_ms"), med(sk, f"{kind}_p99_ms")
            vs = f" ({p50 / s50:.2f}× / {p99 / s99:.2f}×)" if sk and s50 and s99 else ""
            n = int(med(rs, f"{kind}_jobs"))
            cells += [f"{fmt(p50)} / {fmt(p99)}{vs}", f"{n:,}"]
        cells.append(verified(rs))
        lines.append(cells)
    head = [
        "system",
        "setting",
        "what",
        "backlog",
        "backlog jobs/s",
        "higher priority, busy queue: p50 / p99 ms (× skiplock's)",
        "timed",
        "other queue: p50 / p99 ms (× skiplock's)",
        "timed",
        "verified",
    ]
    return table(head, lines)


def scale_section(results: list[dict[str, Any]], plan: Plan) -> str:
    lines = []
    for system in ("skiplock", "sql-ceiling"):
        base = med(select(results, workload="scale", system=system, case=CASES[0]), "claim_exec_ms")
        for case in CASES:
            rs = select(results, workload="scale", system=system, case=case)
            if not rs:
                continue
            m = med(rs, "claim_exec_ms")
            lines.append(
                [
                    system,
                    case.replace("1M", f"{plan.scale_background:,}"),
                    fmt_stats(stats(rs, "claim_exec_ms")),
                    f"{m / base:.2f}×",
                    fmt(med(rs, "claim_buffers")),
                    fmt_stats(stats(rs, "claim_p50_ms")),
                    fmt_stats(stats(rs, "drain_jobs_per_s")),
                    verified(rs),
                ]
            )
    head = [
        "system",
        f"table ({plan.scale_due:,} due jobs +)",
        "claim of 10: server ms",
        "vs first row",
        "buffers",
        "claim client p50 ms (commit incl.)",
        "drain jobs/s",
        "verified",
    ]
    return table(head, lines)


def longtx_section(results: list[dict[str, Any]]) -> str:
    rows = select(results, workload="longtx")
    lines = []
    for (system, setting), rs in groups(rows, "system", "setting").items():
        lines.append(
            [
                system,
                setting,
                fmt(med(rs, "before_jobs_per_s")),
                fmt(med(rs, "during_jobs_per_s")),
                fmt(med(rs, "after_jobs_per_s")),
                f"{med(rs, 'during_over_before'):.0%}",
                fmt(med(rs, "max_dead_tuples")),
                f"{rs[0].get('jobs', 0):,}",
                verified(rs),
            ]
        )
    head = [
        "system",
        "setting",
        "before jobs/s",
        "during jobs/s",
        "after jobs/s",
        "during / before",
        "max dead tuples",
        "jobs",
        "verified",
    ]
    return table(head, lines)


# -- charts ---------------------------------------------------------------------------------


def charts(out: Path, results: list[dict[str, Any]], plan: Plan) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    sizes = sorted({r["size"] for r in select(results, workload="drain")})
    if sizes:
        fig, axes = plt.subplots(
            len(sizes), 1, figsize=(9, 1.2 + 0.45 * 14 * len(sizes)), squeeze=False
        )
        for ax, size in zip(axes[:, 0], sizes, strict=True):
            g = groups(select(results, workload="drain", size=size), "system", "setting")
            items = sorted(g.items(), key=lambda kv: med(kv[1], "jobs_per_s"))
            labels = [f"{s}/{st}" for (s, st), _ in items]
            meds = [med(rs, "jobs_per_s") for _, rs in items]
            lows = [
                m - (stats(rs, "jobs_per_s") or (m, m, m))[1]
                for m, (_, rs) in zip(meds, items, strict=True)
            ]
            highs = [
                (stats(rs, "jobs_per_s") or (m, m, m))[2] - m
                for m, (_, rs) in zip(meds, items, strict=True)
            ]
            ax.barh(
                labels,
                meds,
                xerr=[lows, highs],
                capsize=3,
                color=[COLORS.get(s, "grey") for (s, _), _ in items],
            )
            for batch, style in ((10, "--"), (100, ":")):
                c = ceiling_best(results, batch)
                if not math.isnan(c):
                    ax.axvline(
                        c,
                        color="black",
                        linestyle=style,
                        linewidth=1,
                        label=f"SQL ceiling, {batch}/statement, mark done",
                    )
            ax.set_title(f"Drain of {size:,} preloaded no-op jobs (median, min–max)")
            ax.set_xlabel("jobs/s")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "drain.png", dpi=110)
        plt.close(fig)
        written.append("drain.png")
    lat = select(results, workload="latency")
    if lat:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for (system, setting), rs in groups(lat, "system", "setting").items():
            samples = sorted(x for r in rs for x in r.get("samples_ms", []))
            if not samples:
                continue
            ys = [(i + 1) / len(samples) for i in range(len(samples))]
            ax.plot(samples, ys, label=f"{system}/{setting}", color=COLORS.get(system))
        ax.set_xscale("log")
        ax.set_xlabel("enqueue call → handler start (ms, log scale)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"Latency on idle workers, {plan.latency_rate:.0f} enqueues/s (all repeats)")
        ax.axvline(10, color="black", linestyle=":", linewidth=1, label="10 ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "latency.png", dpi=110)
        plt.close(fig)
        written.append("latency.png")
    sc = select(results, workload="scale")
    if sc:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        width = 0.38
        for i, system in enumerate(("skiplock", "sql-ceiling")):
            vals = [med(select(sc, system=system, case=c), "claim_exec_ms") for c in CASES]
            xs = [j + (i - 0.5) * width for j in range(len(CASES))]
            ax.bar(xs, vals, width, label=system, color=COLORS[system])
            for x, v in zip(xs, vals, strict=True):
                if not math.isnan(v):
                    ax.annotate(f"{v:.2g}", (x, v), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(CASES)))
        ax.set_xticklabels(
            [c.replace("1M", f"{plan.scale_background:,}") for c in CASES], fontsize=8
        )
        ax.set_yscale("log")
        ax.set_ylabel("server time of one claim of 10 (ms, log)")
        ax.set_title("Claim cost vs table size (EXPLAIN ANALYZE, median)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "scale.png", dpi=110)
        plt.close(fig)
        written.append("scale.png")
    lt = select(results, workload="longtx")
    if lt:
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
        for r in lt:
            tl = r.get("throughput_timeline") or []
            a1.plot(
                range(len(tl)),
                tl,
                label=f"{r['system']}/{r['setting']}",
                color=COLORS.get(r["system"]),
            )
            dead = r.get("timeline") or []
            a2.plot(
                [p["t"] for p in dead],
                [p["dead"] for p in dead],
                color=COLORS.get(r["system"]),
                label=r["system"],
            )
        if lt and lt[0].get("hold"):
            for ax in (a1, a2):
                ax.axvspan(*lt[0]["hold"], color="red", alpha=0.08, label="snapshot held")
        a1.set_ylabel("jobs/s (handler starts)")
        a1.set_title("Sustained enqueue + drain with a long transaction holding its snapshot")
        a1.legend(fontsize=8)
        a2.set_ylabel("dead tuples (hot table)")
        a2.set_xlabel("seconds")
        fig.tight_layout()
        fig.savefig(out / "longtx.png", dpi=110)
        plt.close(fig)
        written.append("longtx.png")
    return written


# -- the document ---------------------------------------------------------------------------


def write(out: Path, meta: dict[str, Any], plan: Plan, results: list[dict[str, Any]]) -> None:
    pngs = charts(out, results, plan)
    m = meta["machine"]
    v = meta["versions"]
    srv = meta["server"]
    bad = [r for r in results if not r.get("verified")]
    doc = [
        "# skiplock benchmark results",
        "",
        "Generated by `python -m bench` (see `bench/README.md`); do not edit by hand.",
        "",
        f"- **Command:** `{meta['command']}`",
        f"- **Date:** {meta['started']} (UTC), {meta['seconds']:.0f} s in total "
        + "("
        + ", ".join(f"{k} {s:.0f} s" for k, s in meta.get("timings", {}).items())
        + ")",
        "- **Mode:** "
        + ("quick (CI smoke: tiny sizes, figures meaningless)" if meta["quick"] else "full")
        + f", {plan.repeat} repetition(s) per figure (100k drains: {plan.big_drain_repeat}); "
        "tables show the median and (min–max)",
        f"- **Machine:** {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('memory_gib')} GiB; "
        f"{m.get('platform')}; load average {' '.join(m.get('loadavg_start', []))} at start, "
        f"{' '.join(meta.get('loadavg_end', []))} at end (other work shares this machine: "
        "expect noise, read ratios within one run)",
        f"- **PostgreSQL:** {srv.get('server_version')} on the same machine; shared_buffers "
        f"{srv.get('shared_buffers')}, synchronous_commit {srv.get('synchronous_commit')}, "
        f"fsync {srv.get('fsync')}; one-row commit {meta.get('commit_ms', float('nan')):.2f} ms "
        "at start (the fsync every transaction pays, which is why batching dominates)",
        f"- **skiplock source:** {meta.get('source')} (the last commit that changed src/)"
        + (
            f" — **changed during the run** (at the end: {meta.get('source_end')}); "
            "figures may mix two versions"
            if meta.get("source_end") not in (None, meta.get("source"))
            else ""
        ),
        f"- **Versions:** Python {m.get('python')}; "
        + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- **Runs:** {len(results)}, counts verified in {len(results) - len(bad)}"
        + (f" — **{len(bad)} NOT VERIFIED** (see the end)" if bad else ""),
        "",
        "## Targets (issue 5)",
        "",
        table(["target", "figure (this run)", "verdict"], targets(results, plan, m.get("cpus"))),
        "",
        "## How it is measured",
        "",
        "- Each run gets a freshly created database (`DROP/CREATE DATABASE`), the system's own "
        "schema install (skiplock `migrate`; `pgq install` + `pgq autovac`; `procrastinate schema "
        "--apply`), a preload through the library's own bulk API, then `ANALYZE`.",
        "- Workers are each system's own worker, started as subprocesses: `python -m skiplock "
        "worker`, PGQueuer's `pgqueuer.run(...)` (what `pgq run` calls; `pgq run` itself fails "
        "with typer 0.29, see `bench/apps/pgqueuer_worker.py`) on asyncpg + uvloop, `procrastinate "
        "worker`. Handlers are async no-ops that record the job's number and start time "
        "(skiplock's `sync` settings: the same no-op as a plain `def`, run in its task threads).",
        "- **Verified** = the handlers ran every job exactly once (their records, merged across "
        "processes) *and* the system's tables agree (skiplock: all `done`, attempts = 1; PGQueuer: "
        "queue empty, one `picked` and one `successful` log row per job; Procrastinate: all "
        "`succeeded`, attempts = 1; ceiling: all done/deleted, attempts = 1).",
        "- **Drain jobs/s** = jobs ÷ (first handler start → first moment the monitor (polling "
        "every 20 ms) sees nothing pending or running). Worker start-up is reported apart.",
        "- **Max claimed-unrecorded** = most jobs seen claimed but not yet recorded as finished "
        "(skiplock `running`, PGQueuer `picked`, Procrastinate `doing`), sampled every ~60 ms: "
        "the jobs a `kill -9` at that moment would make run again (crash exposure).",
        "- **Per job:** statements = from a separate drain of the same setting whose workers "
        "connect through a counting proxy (see below); xacts = `pg_stat_database` "
        "commits+rollbacks of the bench database ÷ jobs; WAL = "
        "`pg_current_wal_lsn()` delta (server-wide: includes other activity on the server); worker "
        "CPU = utime+stime of the worker processes (`/proc`); PG CPU = utime+stime of the backends "
        "`pg_stat_activity` lists for the bench database (autovacuum included), between the first "
        "handler start and the end.",
        "- **CPU bound** (in the ceiling targets) = CPUs ÷ (worker CPU + PG CPU per job): the "
        "most the drain could reach if every core ran only it at the CPU per job it cost (the "
        "worker and PostgreSQL share this machine's cores; the ceiling's client is pgbench, whose "
        "CPU per job is in its table). Where it is below what a target needs, only less CPU per "
        "job can meet that target.",
        f"- Procrastinate drains {plan.procrastinate_drain:,} jobs instead of the listed size "
        "(it runs ~100–300 jobs/s here; its rate does not depend on the size at this scale).",
        "- **Celery** (`celery-redis`, `celery-rabbitmq`): its own worker (`celery -A "
        "bench.apps.celery_app worker`, prefork or threads pool, `--prefetch-multiplier`, "
        "`task_acks_late` where named, without gossip/mingle/heartbeat), no result backend. "
        "Its jobs are not in PostgreSQL: verified = the handlers' records (every job exactly "
        "once) and nothing left in the broker (Redis: the queue and Celery's unacked hash; "
        "RabbitMQ: the queue's ready messages once the worker has stopped); the drain ends when "
        "every job has started and the broker holds none; claimed-unrecorded = Redis's unacked "
        "messages (RabbitMQ: not measured). It has no bulk send, so it drains "
        f"{plan.celery_drain:,} jobs (or the listed size, if smaller). Not in the statements, "
        "enqueue and long-transaction workloads (no SQL); skipped when its broker is not "
        "reachable (the run's `results.json` says why, under `meta.skipped`).",
        "- **Dramatiq** (`dramatiq-redis`, `dramatiq-rabbitmq`): its own worker (`dramatiq "
        "bench.apps.dramatiq_app --processes P --threads T`, the prefetch from "
        "`dramatiq_queue_prefetch` where named, else its default of twice the threads) on its "
        "Redis or its RabbitMQ broker, default middleware, no result backend; verified like "
        "Celery: the handlers' records, and no message left queued, unacknowledged (Redis: a "
        "message's body stays in the queue's `.msgs` hash until its ack; RabbitMQ: the ready "
        "messages once the worker has stopped, its unacknowledged ones not measured) or "
        "dead-lettered. Like Celery it has no bulk send and drains "
        f"{plan.celery_drain:,} jobs (or the listed size, if smaller); on Redis its idle "
        "consumer polls with a backoff of up to 1 s (no blocking pop), on RabbitMQ the broker "
        "pushes to it.",
        "",
        "## Drain",
        "",
        drain_section(results),
        "",
        "## Real work",
        "",
        "Drains whose handlers do the same work in every system (`bench/apps/work.py`, given by "
        "the setting as `BENCH_WORK`): **async-io** awaits 5 ms (concurrency 100, 1 process), "
        "**sync-io** sleeps 5 ms in a plain `def` handler, which the system runs in a thread "
        "(concurrency 50, 1 process; PGQueuer has no sync handlers), **cpu** burns 1 ms of "
        "the thread's CPU in pure Python in an async handler (2 processes). Jobs preloaded: "
        + ", ".join(f"{k} {n:,}" for k, n in plan.work_jobs.items())
        + f"; Procrastinate {plan.work_procrastinate:,}; Celery and Dramatiq at most "
        f"{plan.celery_drain:,}. Celery runs no coroutines: its async-io job is a plain `def` "
        "that runs an event loop of its own for the await, in one of the 100 threads of its "
        "threads pool; Dramatiq's is an `async def` that its `AsyncIO` middleware runs in an "
        "event loop thread while one of its 100 worker threads waits. Their cpu rows run 2 "
        "processes (Celery's prefork pool, Dramatiq's `--processes`). **Ideal** = concurrency "
        "× processes ÷ job time; for cpu, one job at a time per process (the GIL), at most "
        "one process per core. **CPU bound** = cores ÷ (worker CPU + PG CPU per job): with "
        "the handlers' own CPU in it, the most the cores allow at this run's cost per job; an "
        "ideal above it cannot be reached on this machine. Verified like the drain (every job "
        "exactly once). **no-queue** is the same work with no queue: the coroutines or "
        "threads of one process taking the jobs from a counter (`bench/apps/work.py`, "
        "`floor`), run right after skiplock's row: what the timers and wake-ups allow here, "
        "the most any queue's row could show.",
        "",
        work_section(results, m.get("cpus")),
        "",
        "## Statements per job (a drain through a counting proxy)",
        "",
        statements_section(results, plan),
        "",
        "## SQL ceiling (pgbench, the seed's claim + ownership-checked finish, no worker)",
        "",
        "One pgbench transaction = claim N (`LIMIT N FOR UPDATE SKIP LOCKED`, lease committed) + "
        "finish them (UPDATE to done, or DELETE); `-M prepared`; jobs/s = tps × N. pgbench CPU = "
        "the client's own user + system time (it stands where a drain's worker does).",
        "",
        ceiling_section(results),
        "",
        "### skiplock's own claim and finish, run the same way",
        "",
        "skiplock's claim as its worker sends it (`job_claim`: the better/after union, the "
        "entity-key checks, the lease committed without waiting for the WAL flush) and its "
        "ownership-checked finish (`job_complete_many`, `job_delete_many`), on skiplock's "
        "schema, by pgbench as above, back to back with the seed's runs. What separates these "
        "figures from the seed's is the cost of skiplock's SQL; what separates them from a "
        "skiplock drain is the worker's. In the statements' favour: the claimed rows are "
        "gathered into two arrays in the server instead of being sent, every claim reads the "
        "claim index from its start (the worker's claim cursor is Python's), and parameters "
        "other than the LIMIT are written into the statement (`bench/own_sql.py`).",
        "",
        ceiling_section(results, "skiplock-sql"),
        "",
        "## Enqueue",
        "",
        f"Single: one job per call and transaction ({plan.enqueue_single:,} jobs; Procrastinate "
        f"a quarter of that). Bulk: {plan.enqueue_bulk:,} jobs in calls of {plan.bulk_batch:,} "
        "(skiplock `enqueue_many_async`, PGQueuer `Queries.enqueue` with lists, Procrastinate "
        "`batch_defer_async`). All async, one connection, from the bench process.",
        "",
        enqueue_section(results),
        "",
        "## Latency",
        "",
        f"Idle workers (started, listening), then single enqueues at {plan.latency_rate:.0f}/s for "
        f"{plan.latency_seconds:.0f} s; latency = handler start − time just before the enqueue "
        "call (same clock). `sql-floor` is no library: the seed's INSERT+NOTIFY, and a worker "
        "that LISTENs and claims with the seed's statement (committed) on one psycopg "
        "connection (`bench/apps/sql_floor_worker.py`): the two commits and the round trips "
        "every queue built this way pays. A library's overhead is its p50 minus the floor's. "
        "CPU per job: of the worker processes and of their server backends while the jobs "
        "came in (idle polling included; not the enqueues'), where each job tends to get a "
        "claim and a write of its own.",
        "",
        latency_section(results),
        "",
        "## Latency under load",
        "",
        "A backlog preloaded on one queue (jobs listed by system, each system's default worker "
        "serving that queue and a second one); once the workers run it, single enqueues at "
        f"{plan.underload_rate:.0f}/s each of a job at a higher priority on the busy queue "
        "(skiplock priority −1 against 0, PGQueuer and Procrastinate 10 against 0) and of a "
        f"job on the other queue, for up to {plan.underload_seconds:.0f} s or until the backlog "
        "is gone. Latency = handler start − time just before the enqueue call, over the jobs "
        "sent before the backlog's last job started (**timed**); every job, the backlog's too, "
        "is verified to have run exactly once, on Redis and on RabbitMQ for Celery and "
        "Dramatiq. They have no higher-priority row: neither orders a queue's messages by "
        "priority as set up here (Celery on Redis only through `priority_steps` lists with the "
        "backlog sent at a lower priority, on RabbitMQ only on a queue declared with "
        "`x-max-priority`; Dramatiq's actor priority orders only the messages a worker has "
        "already fetched).",
        "",
        underload_section(results),
        "",
        "## Scale: claim cost vs table size",
        "",
        "Server time from `EXPLAIN (ANALYZE, BUFFERS)` of one claim of 10 (median of 31 "
        "rolled-back runs, after a `CHECKPOINT` that ends the setup's bulk writes; the four "
        "cases' tables exist at once and their claims take turns statement by statement, so "
        "each repetition compares them over the same moments); client p50 from timed claim "
        "statements (autocommit, so it includes the "
        f"commit's fsync); drain jobs/s from a `{plan.scale_setting.label}` worker run on the same "
        "table. The ceiling's 'future' rows can only be pending rows with a future run_at (the "
        "seed's design); skiplock keeps them `scheduled`, outside the claim index. Ceiling client "
        "latency is pgbench's mean per statement.",
        "",
        scale_section(results, plan),
        "",
        "## Long transaction",
        "",
        "Workers run while the bench keeps ~2,000 jobs enqueued but not started (bulk "
        "enqueues; it follows the handlers' own start counts, not the table: counting pending "
        "rows every 50 ms walks the index entries the held snapshot keeps, and took most of a "
        "server process during the hold, in earlier runs); after "
        f"{plan.longtx[0]:g} s a REPEATABLE READ session takes a snapshot and holds it for "
        f"{plan.longtx[1]:g} s, then {plan.longtx[2]:g} s more. jobs/s from handler starts per "
        "window (first moments of each window skipped); dead tuples from `pg_stat_user_tables`. "
        "One repetition per system (each run takes the whole duration).",
        "",
        longtx_section(results),
        "",
        "## Charts",
        "",
        *[f"![{p}]({p})" for p in pngs],
        "",
    ]
    if bad:
        doc += ["## Runs whose counts did not verify", ""]
        for r in bad:
            doc.append(
                f"- {r['workload']} {r['system']}/{r['setting']} rep {r['rep']}: "
                + "; ".join(str(p) for p in r.get("problems", []))
            )
        doc.append("")
    (out / "RESULTS.md").write_text("\n".join(doc))
