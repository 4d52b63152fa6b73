"""The same drains against two or more skiplock source trees, interleaved: before/after, one run.

    python -m bench.pairs --tree before=/path/to/old/src --tree after=src \\
        [--settings default,sync,x2,x2-sync] [--jobs 20000] [--pairs 5] [--dsn DSN]

``--settings held`` drains with held-lock workers (``--model held``), a setting of its own here.

Each round drains every setting once per tree, the trees in turn (the order alternates from one
round to the next), so that a machine whose speed drifts, or that other work shares, slows every
variant alike. The workers import skiplock from the tree's directory (``PYTHONPATH``); the bench
itself and the producer are this checkout's. Prints each drain as it ends, then per tree and
setting the median jobs/s (min-max) and worker CPU per job, and the ratios the sync settings are
held to: each ``<name>-sync`` (or ``sync``) against its async twin (``<name>``, or ``default``),
in the same tree, as the ratio of the medians and round by round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from .db import BenchDatabase, default_dsn
from .plan import PAIRS_ONLY, make_plan
from .systems import SYSTEMS
from .workloads import Context, drain


def twin(label: str) -> str | None:
    """The async setting a sync one is compared with."""
    if label == "sync":
        return "default"
    if label.endswith("-sync"):
        return label[: -len("-sync")]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="name=path of a src/")
    parser.add_argument("--settings", default="default,sync,x2,x2-sync")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=5, help="rounds")
    parser.add_argument("--dsn", default=None, help="server (default: $SKIPLOCK_DATABASE_URL)")
    parser.add_argument("--database", default="skiplock_pairs", help="created, then dropped")
    args = parser.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.tree)
    trees = {name: str(Path(path).resolve()) for name, path in trees.items()}
    plan = make_plan(False, None)
    every = [*plan.drain_settings, *PAIRS_ONLY]
    known = {s.label: s for s in every if s.system == "skiplock"}
    settings = [known[label] for label in args.settings.split(",")]
    db = BenchDatabase(args.dsn or default_dsn(), args.database)
    ctx = Context(db, Path(tempfile.mkdtemp(prefix="bench-pairs-")), False)
    base_path = os.environ.get("PYTHONPATH", "")
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    names = list(trees)
    try:
        for round_no in range(args.pairs):
            order = names if round_no % 2 == 0 else names[::-1]
            for setting in settings:
                for name in order:
                    os.environ["PYTHONPATH"] = os.pathsep.join(
                        filter(None, [trees[name], base_path])
                    )
                    out = None
                    for _ in range(3):  # a shared server may refuse a connection for a while
                        try:
                            out = drain(ctx, SYSTEMS["skiplock"], setting, args.jobs)
                            break
                        except psycopg.OperationalError as exc:
                            print(f"round {round_no + 1} {name} {setting.label}: {exc}; again")
                            time.sleep(10)
                    if out is None:
                        continue
                    out["round"] = round_no
                    rows.setdefault((name, setting.label), []).append(out)
                    print(
                        f"round {round_no + 1} {name:>8} {setting.label:>8}: "
                        f"{out['jobs_per_s']:,.0f} jobs/s, worker CPU "
                        f"{out['worker_cpu_us_per_job']:.1f} us/job, max claimed-unrecorded "
                        f"{out['max_inflight']}{'' if out['verified'] else ' NOT VERIFIED'}"
                        f"{'' if out['verified'] else ': ' + str(out['problems'])}",
                        flush=True,
                    )
    finally:
        os.environ["PYTHONPATH"] = base_path
        db.drop()
    print(f"\n{args.pairs} rounds of {args.jobs:,} jobs, interleaved; medians (min-max):")
    medians: dict[tuple[str, str], float] = {}
    for (name, label), outs in rows.items():
        rates = [o["jobs_per_s"] for o in outs]
        cpu = statistics.median(o["worker_cpu_us_per_job"] for o in outs)
        medians[(name, label)] = statistics.median(rates)
        print(
            f"  {name:>8} {label:>8}: {statistics.median(rates):,.0f} "
            f"({min(rates):,.0f}-{max(rates):,.0f}) jobs/s, worker CPU {cpu:.1f} us/job"
        )
    for name in names:
        for setting in settings:
            other = twin(setting.label)
            if other and (name, other) in medians:
                ratio = medians[(name, setting.label)] / medians[(name, other)]
                mine = {o["round"]: o["jobs_per_s"] for o in rows[(name, setting.label)]}
                theirs = {o["round"]: o["jobs_per_s"] for o in rows[(name, other)]}
                each = [mine[r] / theirs[r] for r in sorted(mine) if r in theirs]
                print(
                    f"  {name:>8} {setting.label} / {other}: {ratio:.2f}x (medians); per round "
                    + ", ".join(f"{r:.2f}" for r in each)
                    + (f", median {statistics.median(each):.2f}x" if each else "")
                )
    return 0 if all(o["verified"] for outs in rows.values() for o in outs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
