"""``python -m bench``: skiplock, PGQueuer, Procrastinate and the raw-SQL ceiling, side by side.

    python -m bench [--quick] [--dsn DSN] [--repeat N] [--only drain,enqueue,...] [--out DIR]

Writes DIR/RESULTS.md, DIR/results.json and DIR/*.png.  Exits 1 when any run's counts did not
verify (every job exactly once, none failed), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import ceiling, own_sql, report, scale
from .apps.work import parse as parse_work
from .db import BenchDatabase, default_dsn, server_info
from .plan import Plan, make_plan, plan_from_dict
from .systems import QUEUES, SYSTEMS, Setting, versions
from .workloads import (
    Context,
    drain,
    drop_templates,
    enqueue,
    latency,
    long_transaction,
    real_work,
    under_load,
    work_floor,
)

WORKLOADS = (
    "enqueue",
    "drain",
    "statements",
    "work",
    "latency",
    "underload",
    "scale",
    "longtx",
    "ceiling",
)

log = logging.getLogger("bench")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI smoke: small sizes, 1 repeat")
    parser.add_argument("--dsn", default=None, help="server (default: $SKIPLOCK_DATABASE_URL)")
    parser.add_argument(
        "--database",
        default="skiplock_bench",
        help="database to create/drop for the runs (default: skiplock_bench)",
    )
    parser.add_argument("--repeat", type=int, default=None, help="repetitions (3; quick: 1)")
    parser.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"comma-separated subset of {','.join(WORKLOADS)}",
    )
    parser.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parent),
        help="directory for RESULTS.md, results.json, charts (default: bench/)",
    )
    parser.add_argument(
        "--settings",
        default=None,
        help="comma-separated system/label to run, e.g. skiplock/default,pgqueuer/b500x2 "
        "(default: all; a focused look, not a full report)",
    )
    parser.add_argument(
        "--sizes",
        default=None,
        help="comma-separated drain sizes instead of the plan's (e.g. 20000)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite RESULTS.md and the charts from OUT/results.json, run nothing",
    )
    args = parser.parse_args(argv)
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(only) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s) {sorted(unknown)}; choose from {WORKLOADS}")
    args.only = only
    return args


def focus(plan: Plan, wanted: set[str]) -> Plan:
    """The plan with only the settings named ``system/label``."""

    def keep(settings: list[Setting]) -> list[Setting]:
        return [s for s in settings if f"{s.system}/{s.label}" in wanted]

    plan.drain_settings = keep(plan.drain_settings)
    plan.big_drain_settings = keep(plan.big_drain_settings)
    plan.latency_settings = keep(plan.latency_settings)
    plan.longtx_settings = keep(plan.longtx_settings)
    plan.statements_settings = keep(plan.statements_settings)
    plan.work_settings = keep(plan.work_settings)
    plan.underload_settings = keep(plan.underload_settings)
    return plan


def drop_unavailable(plan: Plan) -> dict[str, str]:
    """Leave out the settings of systems that cannot run here (a broker not reachable, a
    package not installed); returns why, by system."""
    why: dict[str, str] = {}
    planned = {
        s.system
        for s in plan.drain_settings
        + plan.big_drain_settings
        + plan.latency_settings
        + plan.longtx_settings
        + plan.statements_settings
        + plan.work_settings
        + plan.underload_settings
    }
    for name, system in SYSTEMS.items():
        reason = system.available() if name in planned else None
        if reason:
            why[name] = reason

    def keep(settings: list[Setting]) -> list[Setting]:
        return [s for s in settings if s.system not in why]

    plan.drain_settings = keep(plan.drain_settings)
    plan.big_drain_settings = keep(plan.big_drain_settings)
    plan.latency_settings = keep(plan.latency_settings)
    plan.longtx_settings = keep(plan.longtx_settings)
    plan.statements_settings = keep(plan.statements_settings)
    plan.work_settings = keep(plan.work_settings)
    plan.underload_settings = keep(plan.underload_settings)
    return why


class Runner:
    def __init__(self, ctx: Context, plan: Plan) -> None:
        self.ctx = ctx
        self.plan = plan
        self.results: list[dict[str, Any]] = []
        self.timings: dict[str, float] = {}

    def measure(
        self,
        workload: str,
        system: str,
        setting: str,
        rep: int,
        fn: Callable[[], dict[str, Any]],
        **labels: Any,
    ) -> dict[str, Any]:
        t0 = time.monotonic()
        try:
            out = fn()
        except Exception as exc:
            log.error("%s %s/%s failed: %s", workload, system, setting, exc)
            traceback.print_exc()
            out = {"verified": False, "problems": [f"{type(exc).__name__}: {exc}"]}
        row = {
            "workload": workload,
            "system": system,
            "setting": setting,
            "rep": rep,
            **labels,
            **out,
            "wall_s": time.monotonic() - t0,
        }
        self.results.append(row)
        brief = {
            k: v for k, v in out.items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        main = next(
            (
                k
                for k in (
                    "statements_per_job",
                    "jobs_per_s",
                    "p50_ms",
                    "urgent_p99_ms",
                    "during_over_before",
                    "claim_exec_ms",
                )
                if k in brief
            ),
            None,
        )
        log.info(
            "%-8s %-14s %-16s %s rep %d: %s%s (%.1fs)",
            workload,
            system,
            setting,
            " ".join(f"{k}={v}" for k, v in labels.items()),
            rep,
            f"{main}={brief[main]:.4g}" if main else "",
            "" if out.get("verified") else f"  NOT VERIFIED: {out.get('problems')}",
            row["wall_s"],
        )
        return row

    def timed(self, name: str, fn: Callable[[], None]) -> None:
        t0 = time.monotonic()
        fn()
        self.timings[name] = time.monotonic() - t0

    # -- workloads ---------------------------------------------------------------------------

    def enqueue(self) -> None:
        p = self.plan
        for rep in range(p.repeat):
            for system in QUEUES:
                for mode, n, bulk in (
                    (
                        "single",
                        p.enqueue_single // (4 if system.name == "procrastinate" else 1),
                        None,
                    ),
                    ("bulk", p.enqueue_bulk, p.bulk_batch),
                ):
                    self.measure(
                        "enqueue",
                        system.name,
                        mode,
                        rep,
                        lambda s=system, n=n, b=bulk: enqueue(self.ctx, s, n, b),
                    )

    def drain(self) -> None:
        p = self.plan
        for size in p.drain_sizes:
            big = size == max(p.drain_sizes) and len(p.drain_sizes) > 1
            settings = p.big_drain_settings if big else p.drain_settings
            for rep in range(p.big_drain_repeat if big else p.repeat):
                for setting in settings:
                    n = p.procrastinate_drain if setting.system == "procrastinate" else size
                    if setting.system.startswith(("celery", "dramatiq")) and p.celery_drain:
                        n = min(n, p.celery_drain)
                    self.measure(
                        "drain",
                        setting.system,
                        setting.label,
                        rep,
                        lambda st=setting, n=n: drain(self.ctx, SYSTEMS[st.system], st, n),
                        size=size,
                        notes=setting.notes,
                    )
                if any(s.system == "skiplock" for s in settings):
                    self.ceiling_alongside(size, rep)

    def statements(self) -> None:
        """One drain per setting with the workers connected through the counting proxy."""
        p = self.plan
        for setting in p.statements_settings:
            n = p.procrastinate_drain if setting.system == "procrastinate" else p.statements_jobs
            self.measure(
                "statements",
                setting.system,
                setting.label,
                0,
                lambda st=setting, n=n: drain(
                    self.ctx, SYSTEMS[st.system], st, n, count_statements=True
                ),
                size=n,
                notes=setting.notes,
            )

    def work(self) -> None:
        """Real work: each setting drains jobs whose handlers await, sleep in a thread or burn
        CPU (bench/apps/work.py), against its ideal rate; repetitions outside, so the systems
        take turns."""
        p = self.plan
        cores = len(os.sched_getaffinity(0))
        for rep in range(p.repeat):
            for setting in p.work_settings:
                kind = parse_work(setting.work)[0]
                n = p.work_procrastinate if setting.system == "procrastinate" else p.work_jobs[kind]
                if setting.system.startswith(("celery", "dramatiq")) and p.celery_drain:
                    n = min(n, p.celery_drain)  # no bulk send: their preload is one at a time
                self.measure(
                    "work",
                    setting.system,
                    setting.label,
                    rep,
                    lambda st=setting, n=n: real_work(self.ctx, SYSTEMS[st.system], st, n, cores),
                    size=n,
                    kind=kind,
                    notes=setting.notes,
                )
                if (
                    setting.system == "skiplock"
                    and kind in ("async-io", "sync-io")
                    and not setting.extra
                ):
                    self.measure(
                        "work",
                        "no-queue",
                        setting.label,
                        rep,
                        lambda st=setting, n=n: work_floor(st, n, cores),
                        size=n,
                        kind=kind,
                        notes="the same work in coroutines or threads of one process, no queue",
                    )

    def ceiling_alongside(self, size: int, rep: int) -> None:
        """The SQL ceiling at the batch size the drain targets compare with, right after each
        repetition of the drains: this machine's speed drifts by a third over minutes, and the
        ceiling workload itself runs a quarter of an hour later."""
        p = self.plan
        batch = max(p.ceiling_batches)
        for mode in p.ceiling_modes:
            for clients in p.ceiling_clients:
                self.measure(
                    "drain-ceiling",
                    ceiling.SEED.system,
                    f"n{batch}-{mode}-c{clients}",
                    rep,
                    lambda m=mode, c=clients: ceiling.drain(
                        self.ctx, p.ceiling_jobs[batch], batch, m, c
                    ),
                    size=size,
                    batch=batch,
                    mode=mode,
                    clients=clients,
                )

    def latency(self) -> None:
        p = self.plan
        for rep in range(p.repeat):
            for setting in p.latency_settings:
                self.measure(
                    "latency",
                    setting.system,
                    setting.label,
                    rep,
                    lambda st=setting: latency(
                        self.ctx, SYSTEMS[st.system], st, p.latency_rate, p.latency_seconds
                    ),
                )

    def underload(self) -> None:
        """Latency under load: the systems take turns within each repetition."""
        p = self.plan
        for rep in range(p.repeat):
            for setting in p.underload_settings:
                n = p.underload_jobs[setting.system]
                self.measure(
                    "underload",
                    setting.system,
                    setting.label,
                    rep,
                    lambda st=setting, n=n: under_load(
                        self.ctx, SYSTEMS[st.system], st, n, p.underload_rate, p.underload_seconds
                    ),
                    size=n,
                    notes=setting.notes,
                )

    def scale(self) -> None:
        p = self.plan
        runs = 31 if p.scale_claims > 50 else 5
        # Repetitions outside, cases inside, and within a repetition the four cases' claims are
        # timed in turn, statement by statement (scale.explain_in_turn): this machine's speed
        # drifts, and the targets compare the cases with each other.
        for rep in range(p.repeat):
            for system, setting in (
                ("skiplock", p.scale_setting.label),
                ("sql-ceiling", "n10-done-c1"),
            ):
                ctxs = [scale.case_context(self.ctx, i) for i in range(len(scale.CASES))]
                try:
                    self.scale_cases(system, setting, rep, ctxs, runs)
                finally:
                    for ctx in ctxs:
                        ctx.db.drop()

    def scale_cases(
        self, system: str, setting: str, rep: int, ctxs: list[Context], runs: int
    ) -> None:
        p = self.plan
        explained: list[dict[str, float]] | Exception
        try:
            explained = scale.prepare_cases(system, ctxs, p.scale_background, p.scale_due, runs)
        except Exception as exc:  # recorded below, as every case's failure
            explained = exc

        def one(i: int, case: str) -> dict[str, Any]:
            if isinstance(explained, Exception):
                raise explained
            if system == "skiplock":
                rest = scale.skiplock_case(
                    ctxs[i], case, p.scale_due, p.scale_claims, p.scale_drain_s, p.scale_setting
                )
            else:
                rest = scale.ceiling_case(ctxs[i], case, p.scale_drain_s)
            return {**explained[i], **rest}

        for i, case in enumerate(scale.CASES):
            self.measure("scale", system, setting, rep, lambda i=i, c=case: one(i, c), case=case)

    def longtx(self) -> None:
        p = self.plan
        before, during, after = p.longtx
        for setting in p.longtx_settings:
            self.measure(
                "longtx",
                setting.system,
                setting.label,
                0,
                lambda st=setting: long_transaction(
                    self.ctx,
                    SYSTEMS[st.system],
                    st,
                    before,
                    during,
                    after,
                    backlog=200 if st.system == "procrastinate" else 2000,
                    batch=50 if st.system == "procrastinate" else 500,
                ),
            )

    def ceiling(self) -> None:
        p = self.plan
        for rep in range(p.repeat):
            for batch in p.ceiling_batches:
                for mode in p.ceiling_modes:
                    for clients in p.ceiling_clients:
                        # The seed's statements, then skiplock's own at the same batch size,
                        # finish and clients, back to back (this machine's noise drifts).
                        own = [own_sql.SKIPLOCK] if batch in p.own_sql_batches else []
                        for statements in [ceiling.SEED, *own]:
                            self.measure(
                                "ceiling",
                                statements.system,
                                f"n{batch}-{mode}-c{clients}",
                                rep,
                                lambda b=batch, m=mode, c=clients, st=statements: ceiling.drain(
                                    self.ctx, p.ceiling_jobs[b], b, m, c, st
                                ),
                                batch=batch,
                                mode=mode,
                                clients=clients,
                            )


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": len(os.sched_getaffinity(0)),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["memory_gib"] = round(int(mem) / 1024 / 1024, 1)
        info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    return info


def source_state() -> str:
    """The skiplock source the workers import: the last commit that changed src/ (a commit of
    docs during a run is not a change of what was measured), plus a note if src/ differs."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "log", "-1", "--format=%h", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" +uncommitted changes in src/" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("procrastinate", "pgqueuer", "skiplock", "psycopg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # its warnings include each passive declare of a queue not yet made (the broker's probes)
    logging.getLogger("pika").setLevel(logging.ERROR)
    server = args.dsn or default_dsn()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        saved = json.loads((out / "results.json").read_text())
        plan = plan_from_dict(saved["plan"])
        report.write(out, saved["meta"], plan, saved["results"])
        return 1 if any(not r.get("verified") for r in saved["results"]) else 0
    db = BenchDatabase(server, args.database)
    plan = make_plan(args.quick, args.repeat)
    if args.settings:
        plan = focus(plan, {w.strip() for w in args.settings.split(",") if w.strip()})
    if args.sizes:
        plan.drain_sizes = [int(n) for n in args.sizes.split(",")]
    skipped = drop_unavailable(plan)
    for name, reason in skipped.items():
        log.warning("skipping %s: %s", name, reason)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    # quick: each system's schema installed once, copied for each run (workloads.fresh)
    ctx = Context(db, log_dir, args.quick, templates={} if args.quick else None)
    runner = Runner(ctx, plan)
    started = datetime.now(UTC)
    meta: dict[str, Any] = {
        "command": " ".join(["python -m bench", *(sys.argv[1:] if argv is None else argv)]),
        "source": source_state(),
        "started": started.isoformat(timespec="seconds"),
        "quick": args.quick,
        "repeat": plan.repeat,
        "machine": machine(),
        "versions": versions(),
        "server": server_info(server),
        "database": args.database,
        "worker_logs": str(log_dir),
        "skipped": skipped,
    }
    meta["commit_ms"] = report.commit_latency(db)
    log.info("bench: %s, out=%s, logs=%s", "quick" if args.quick else "full", out, log_dir)
    t0 = time.monotonic()
    try:
        for workload in WORKLOADS:  # fixed order, whatever --only lists
            if workload in args.only:
                runner.timed(workload, getattr(runner, workload))
    finally:
        meta["seconds"] = time.monotonic() - t0
        meta["source_end"] = source_state()
        meta["timings"] = runner.timings
        meta["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
        for cleanup in (db.drop, lambda: drop_templates(ctx)):
            try:
                cleanup()
            except Exception as exc:  # the report matters more than the cleanup
                log.warning("could not drop %s or its templates: %s", args.database, exc)
        (out / "results.json").write_text(
            json.dumps(
                {"meta": meta, "plan": report.plan_dict(plan), "results": runner.results},
                indent=1,
                default=str,
            )
        )
        report.write(out, meta, plan, runner.results)
    bad = [r for r in runner.results if not r.get("verified")]
    log.info(
        "done in %.0fs: %d runs, %d not verified; wrote %s",
        meta["seconds"],
        len(runner.results),
        len(bad),
        out / "RESULTS.md",
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
