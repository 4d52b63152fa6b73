"""``python -m bench.rtt``: drain rate and enqueue -> start latency against the round-trip time.

    python -m bench.rtt [--quick] [--rtts 0,1,5,20] [--jobs 20000] [--repeat 1] [--out FILE]

Root only (network namespaces: bench/hosts.py).  One "host" per round-trip time, each a network
namespace reaching the server through its own delaying proxy (bench/delay_proxy.py), and every
delaying proxy forwarding to one counting proxy (bench/wire.py) in front of the server, so the
round trips each drain's workers made are counted too.  For every repetition, round-trip time
and setting, interleaved in one run: a drain of ``--jobs`` preloaded jobs with the workers in
that host's namespace (workloads.drain), then idle workers there and single enqueues from the
same distance (workloads.latency: enqueue call -> handler start).  Before them, the proxies' own
cost: a ``SELECT 1`` round trip direct, through the counting proxy, and through both at zero
delay; with ``--direct``, also each setting's drain with no proxy and no namespace.

Prints a table and, against the targets of issue 47 (drain at 5 ms >= 90 % of the zero-delay
drain, at 20 ms >= 70 %; enqueue -> start p99 within 3 RTT + the zero-delay p99), whether each
was met; writes every run to ``--out`` (JSON).  Exits 1 when a run's counts did not verify
(every job exactly once), 2 when the harness cannot run here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from .db import BenchDatabase, default_dsn
from .hosts import Hosts, unavailable
from .plan import SK_C100X2_DELETE_F1000, SK_DEFAULT, pgq
from .systems import REPO, SYSTEMS, Setting, Skiplock
from .wire import CountingProxy
from .workloads import Context, drain, latency, wire_per_job

SK_TUNED = SK_C100X2_DELETE_F1000
SETTINGS: tuple[Setting, ...] = (SK_DEFAULT, SK_TUNED, pgq(500, 2))
# Run only when --settings names them: what a larger reserve does on a slow network.
OPTIONAL: tuple[Setting, ...] = (
    Setting("skiplock", "prefetch2000", extra=("--prefetch", "2000"),
            notes="CLI defaults but --prefetch 2000"),
)  # fmt: skip
TARGETS = {5.0: 0.90, 20.0: 0.70}  # share of the zero-delay drain kept at that RTT
# A host whose proxy takes the delaying path with next to no delay: what the path itself costs
# (a thread hand-off per chunk), apart from the round trip (bench/README.md, "Drain and
# latency against the round-trip time").
PATH_BASELINE = 0.02


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.rtt", description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=None, help="server (default: $SKIPLOCK_DATABASE_URL)")
    parser.add_argument("--database", default="skiplock_bench_rtt")
    parser.add_argument("--quick", action="store_true", help="small counts (the tests run it)")
    parser.add_argument("--rtts", default=None, help="round trips in ms (default 0,1,5,20)")
    parser.add_argument("--jobs", type=int, default=None, help="drained per run (20000)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--latency-rate", type=float, default=None, help="enqueues/s (20)")
    parser.add_argument("--latency-seconds", type=float, default=None, help="(10)")
    parser.add_argument("--settings", default=None, help="system/label,... (default: all)")
    parser.add_argument("--direct", action="store_true", help="also drain with no proxy")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--out", default=None, help="JSON file for every run")
    parser.add_argument(
        "--report", default=None, help="print the table of an --out file, run nothing"
    )
    parser.add_argument(
        "--compare-src",
        default=None,
        help="also run each skiplock setting with skiplock imported from DIR (another "
        "checkout's src/), labelled -before, interleaved with the others",
    )
    args = parser.parse_args(argv)
    if args.rtts is None:
        args.rtts = "0,5" if args.quick else f"0,{PATH_BASELINE:g},1,5,20"
    args.rtts = [float(x) for x in args.rtts.split(",")]
    args.jobs = args.jobs or (1000 if args.quick else 20_000)
    args.latency_rate = args.latency_rate or 20.0
    args.latency_seconds = args.latency_seconds or (1.0 if args.quick else 10.0)
    wanted = args.settings.split(",") if args.settings else None
    args.settings = [s for s in SETTINGS if wanted is None or s.key in wanted]
    args.settings += [s for s in OPTIONAL if wanted is not None and s.key in wanted]
    if args.compare_src:
        args.settings = [
            v
            for s in args.settings
            for v in (
                (s, dataclasses.replace(s, label=f"{s.label}-before"))
                if s.system == "skiplock"
                else (s,)
            )
        ]
    if not args.settings:
        parser.error(f"no such setting; choose from {[s.key for s in SETTINGS + OPTIONAL]}")
    return args


def select_1(dsn: str, n: int) -> float:
    """Median seconds of ``SELECT 1`` on one connection, after a warm-up."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(20):
            conn.execute("SELECT 1")
        times = []
        for _ in range(n):
            t = time.perf_counter()
            conn.execute("SELECT 1")
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def proxy_cost(
    db: BenchDatabase, counter: CountingProxy, hosts: Hosts, quick: bool
) -> dict[str, float]:
    """``SELECT 1`` p50 (ms) direct, through the counting proxy, and through each host's
    delaying proxy and the counting proxy behind it (from the root namespace): at zero delay
    the proxies' own cost, at the others the round trip the runs really had."""
    n = 30 if quick else 300
    out = {}
    for _ in range(1 if quick else 2):  # interleaved, the last pass kept
        out = {
            "direct_ms": select_1(db.dsn, n) * 1000,
            "counting_ms": select_1(counter.dsn_through(db.dsn), n) * 1000,
        }
        for host in hosts.hosts:
            k = n if host.rtt_ms < 5 else max(10, n // 5)
            out[f"rtt{host.rtt_ms:g}_ms"] = select_1(host.dsn, k) * 1000
    return out


# The raw-SQL loop of proxy_throughput: each round trip brings this many rows of about the size
# of a claimed job's row (skiplock's drains read ~190 bytes per job from the server).
RAW_ROWS, RAW_ROW_BYTES, RAW_CONNECTIONS = 500, 180, 3


def raw_rows_per_s(dsn: str, seconds: float) -> tuple[float, float]:
    """Rows per second that ``RAW_CONNECTIONS`` connections, each in a loop of one statement
    bringing ``RAW_ROWS`` rows at a time, read through ``dsn`` for ``seconds``; and the median
    round trip of those statements (ms)."""
    sql = f"SELECT repeat('x', {RAW_ROW_BYTES}) FROM generate_series(1, {RAW_ROWS})"
    counts = [0] * RAW_CONNECTIONS
    times: list[list[float]] = [[] for _ in range(RAW_CONNECTIONS)]

    def loop(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql).fetchall()
            end = time.perf_counter() + seconds
            while (t := time.perf_counter()) < end:
                counts[i] += len(conn.execute(sql).fetchall())
                times[i].append(time.perf_counter() - t)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(RAW_CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds, statistics.median(x for ts in times for x in ts) * 1000


def proxy_throughput(
    db: BenchDatabase, counter: CountingProxy, hosts: Hosts, quick: bool
) -> dict[str, float]:
    """What the proxies carry with no queue library at all: a raw-SQL loop's rows per second
    (``raw_rows_per_s``) direct, through the counting proxy and through each host; a proxy that
    were the bottleneck of a drain would carry no more rows than that drain claims."""
    seconds = 0.5 if quick else 2.0
    out = {
        "direct_rows_per_s": raw_rows_per_s(db.dsn, seconds)[0],
        "counting_rows_per_s": raw_rows_per_s(counter.dsn_through(db.dsn), seconds)[0],
    }
    for host in hosts.hosts:
        rate, rtt = raw_rows_per_s(host.dsn, seconds)
        out[f"rtt{host.rtt_ms:g}_rows_per_s"], out[f"rtt{host.rtt_ms:g}_loop_ms"] = rate, rtt
    return out


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    server = args.dsn or default_dsn()
    db = BenchDatabase(server, args.database)
    ctx = Context(db, Path(tempfile.mkdtemp(prefix="bench-rtt-")), args.quick)
    rows: list[dict[str, Any]] = []
    db.recreate()
    with CountingProxy(db.dsn) as counter:
        hosts = Hosts(counter.dsn_through(db.dsn), len(args.rtts), args.rtts)
        try:
            cost = proxy_cost(db, counter, hosts, args.quick)
            rows.append({"workload": "proxy_cost", **cost})
            print("proxy cost (SELECT 1 p50, ms):", json.dumps(cost), flush=True)
            carried = proxy_throughput(db, counter, hosts, args.quick)
            rows.append({"workload": "proxy_throughput", **carried})
            print(
                f"proxy throughput ({RAW_CONNECTIONS} connections, {RAW_ROWS} rows of "
                f"{RAW_ROW_BYTES} bytes a statement, rows/s; loop ms):",
                json.dumps({k: round(v, 1) for k, v in carried.items()}),
                flush=True,
            )
            for rep in range(args.repeat):
                # Rotate the order each repetition, so no RTT always runs first.
                order = (
                    hosts.hosts[rep % len(hosts.hosts) :] + hosts.hosts[: rep % len(hosts.hosts)]
                )
                for setting in args.settings:
                    system = SYSTEMS[setting.system]
                    if setting.label.endswith("-before"):
                        system = _Imported(src=args.compare_src)
                    if args.direct:
                        row = _guarded(drain, ctx, system, setting, args.jobs)
                        rows.append(_row("drain", setting, None, rep, row))
                    for host in order:
                        through = db.through(host.dsn)
                        c0 = counter.counts()
                        row = _guarded(
                            drain, ctx, system, setting, args.jobs, workers_db=through,
                            prefix=host.command(),
                        )  # fmt: skip
                        row.update(wire_per_job(counter.counts().minus(c0), args.jobs))
                        rows.append(_row("drain", setting, host.rtt_ms, rep, row))
                        if args.no_latency:
                            continue
                        row = _guarded(
                            latency, ctx, system, setting, args.latency_rate,
                            args.latency_seconds, workers_db=through, prefix=host.command(),
                            producer_db=through,
                        )  # fmt: skip
                        rows.append(_row("latency", setting, host.rtt_ms, rep, row))
        finally:
            hosts.close()
            db.drop()
    return rows


@dataclasses.dataclass
class _Imported(Skiplock):
    """skiplock's workers importing skiplock from another checkout's ``src``."""

    src: str = ""

    def worker_env(self, setting: Setting) -> dict[str, str]:
        return {**super().worker_env(setting), "PYTHONPATH": f"{REPO}{os.pathsep}{self.src}"}


def _guarded(fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``fn(...)``, or a failed row when it raised (a shared server may refuse a connection)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        traceback.print_exc()
        nan = float("nan")
        return {"jobs_per_s": nan, "p50_ms": nan, "p99_ms": nan, "verified": False,
                "problems": [f"{type(exc).__name__}: {exc}"]}  # fmt: skip


def _row(
    workload: str, setting: Setting, rtt: float | None, rep: int, out: dict[str, Any]
) -> dict[str, Any]:
    row = {"workload": workload, "setting": setting.key, "rtt_ms": rtt, "rep": rep, **out}
    row.pop("samples_ms", None)
    brief = (
        f"{row['jobs_per_s']:,.0f} jobs/s, {row.get('round_trips_per_job', 0):.4f} rt/job"
        if workload == "drain"
        else f"p50 {row['p50_ms']:.1f} p99 {row['p99_ms']:.1f} ms"
    )
    where = "direct" if rtt is None else f"RTT {rtt:g} ms"
    ok = "" if row["verified"] else f"  NOT VERIFIED: {row['problems']}"
    print(f"{workload:8} {setting.key:32} {where:12} {brief}{ok}", flush=True)
    return row


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None and r[key] == r[key]]
    return statistics.median(values) if values else float("nan")


def summary(rows: list[dict[str, Any]], rtts: list[float]) -> list[str]:
    """A markdown table per setting and RTT (medians of the repetitions) and the targets."""
    lines = [
        "| setting | RTT ms | drain jobs/s | of zero-delay | of the delaying path's "
        f"({PATH_BASELINE:g} ms) | round trips/job | connections "
        "| enqueue→start p50 ms | p99 ms | p99 bound (3 measured RTT + zero-delay p99) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    # The round trip each host really had (its proxy's SELECT 1 before the runs): on a loaded
    # machine the proxy's sleeps come late, and the bound is in real round trips.
    cost = next((r for r in rows if r["workload"] == "proxy_cost"), {})
    measured = {rtt: cost.get(f"rtt{rtt:g}_ms", rtt) for rtt in rtts}
    for key in dict.fromkeys(r["setting"] for r in rows if "setting" in r):

        def of(workload: str, rtt: float | None, key: str = key) -> list[dict[str, Any]]:
            return [
                r for r in rows
                if r["workload"] == workload and r.get("setting") == key and r["rtt_ms"] == rtt
            ]  # fmt: skip

        base = _median(of("drain", 0.0), "jobs_per_s")
        path = _median(of("drain", PATH_BASELINE), "jobs_per_s")
        idle_p99 = _median(of("latency", 0.0), "p99_ms")
        direct = of("drain", None)
        if direct:
            lines.append(
                f"| {key} | direct | {_median(direct, 'jobs_per_s'):,.0f} "
                f"| {_median(direct, 'jobs_per_s') / base:.0%} | | | | | | |"
            )
        for rtt in rtts:
            d, lat = of("drain", rtt), of("latency", rtt)
            rate = _median(d, "jobs_per_s")
            p99 = _median(lat, "p99_ms")
            bound = 3 * measured.get(rtt, rtt) + idle_p99
            lines.append(
                f"| {key} | {rtt:g} | {rate:,.0f} | {rate / base:.0%} | {rate / path:.0%} "
                f"| {_median(d, 'round_trips_per_job'):.4f} | {_median(d, 'connections'):.0f} "
                f"| {_median(lat, 'p50_ms'):.1f} | {p99:.1f} | {bound:.1f} |"
            )
            if key.startswith("skiplock/") and rtt in TARGETS:
                met = rate / base >= TARGETS[rtt]
                verdicts.append(
                    f"- {key}, RTT {rtt:g} ms: drain {rate / base:.0%} of zero-delay "
                    f"(target ≥ {TARGETS[rtt]:.0%}): {'met' if met else 'MISSED'}"
                    + (f"; {rate / path:.0%} of the delaying path's" if path == path else "")
                )
            if key.startswith("skiplock/") and rtt > 0 and lat:
                verdicts.append(
                    f"- {key}, RTT {rtt:g} ms: enqueue→start p99 {p99:.1f} ms "
                    f"(target ≤ {bound:.1f}): {'met' if p99 <= bound else 'MISSED'}"
                )
    carried = next((r for r in rows if r["workload"] == "proxy_throughput"), None)
    if carried is not None:
        verdicts.append(
            "- the proxies' own throughput (a raw-SQL loop, no queue library): "
            + ", ".join(
                f"RTT {rtt:g} ms {carried[f'rtt{rtt:g}_rows_per_s']:,.0f} rows/s"
                for rtt in rtts
                if f"rtt{rtt:g}_rows_per_s" in carried
            )
            + f"; direct {carried['direct_rows_per_s']:,.0f}"
        )
    return [*lines, "", *verdicts]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        rows = json.loads(Path(args.report).read_text())
        rtts = sorted({r["rtt_ms"] for r in rows if r.get("rtt_ms") is not None})
        print("\n".join(summary(rows, rtts)))
        return 0
    reason = unavailable()
    if reason is not None:
        print(f"bench.rtt cannot run here: {reason}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    rows = run(args)
    text = "\n".join(summary(rows, args.rtts))
    print(f"\n{text}\n\n({time.monotonic() - t0:.0f} s)")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(r.get("verified", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
