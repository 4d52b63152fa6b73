"""The defaults of ``skiplock worker`` against their neighbours (issue 48, item 5), one run.

    python -m bench.defaults [--jobs 20000] [--rounds 3] [--dsn DSN] [--database NAME]

Each round drains every setting once, in turn (the machine's speed drifts): the CLI defaults
(1 process, concurrency 10, prefetch 500, INFO log), each with one knob moved (processes,
concurrency, prefetch), and real work (bench/apps/work.py) where concurrency and processes
matter most: jobs that await 5 ms at concurrency 10 and 100, jobs that burn 1 ms of CPU in 1
and 2 processes.  For every drain: jobs/s, the most jobs seen claimed and unrecorded (what a
``kill -9`` can run again), the worker's CPU per job, and the most sessions its processes held
at once (sampled from ``pg_stat_activity``) beside the bound the docs give
(``worker_connections``: the connection budget per process).  Prints medians (min-max) per
setting; bench/README.md, "The worker's defaults", keeps the figures.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from .db import BenchDatabase, default_dsn
from .plan import ASYNC_IO, CPU, SK_DEFAULT
from .systems import SYSTEMS, Setting
from .workloads import Context, drain


def settings() -> list[tuple[Setting, int | None]]:
    """(setting, jobs: None = --jobs) in the order each round runs them."""

    def sk(label: str, notes: str, **kw: Any) -> Setting:
        return replace(SK_DEFAULT, label=label, notes=notes, **kw)

    return [
        (SK_DEFAULT, None),
        (sk("p2", "--processes 2", processes=2), None),
        (sk("c1", "--concurrency 1", concurrency=1), None),
        (sk("c50", "--concurrency 50", concurrency=50), None),
        (sk("c100", "--concurrency 100", concurrency=100), None),
        (sk("f0", "--prefetch 0", extra=("--prefetch", "0")), None),
        (sk("f100", "--prefetch 100", extra=("--prefetch", "100")), None),
        (sk("f1000", "--prefetch 1000", extra=("--prefetch", "1000")), None),
        (sk("io-c10", "awaits 5 ms, defaults", work=ASYNC_IO), 5000),
        (sk("io-c100", "awaits 5 ms, --concurrency 100", work=ASYNC_IO, concurrency=100), 5000),
        (sk("cpu-p1", "burns 1 ms, defaults", work=CPU), 2000),
        (sk("cpu-p2", "burns 1 ms, --processes 2", work=CPU, processes=2), 2000),
    ]


class Sessions:
    """The most sessions the workers held at once, sampled every 20 ms while a drain runs."""

    def __init__(self, db: BenchDatabase) -> None:
        self.db = db
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sessions:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.db.server_dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                    " AND application_name LIKE 'skiplock-%%'",
                    (self.db.name,),
                ).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                self._stop.wait(0.02)


def budget(setting: Setting) -> int:
    from skiplock._db.connections import worker_connections

    return worker_connections(setting.concurrency or 10) * setting.processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per drain")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default=None, help="server (default: $SKIPLOCK_DATABASE_URL)")
    parser.add_argument("--database", default="skiplock_defaults", help="created, then dropped")
    args = parser.parse_args(argv)
    db = BenchDatabase(args.dsn or default_dsn(), args.database)
    ctx = Context(db, Path(tempfile.mkdtemp(prefix="bench-defaults-")), False)
    rows: dict[str, list[dict[str, Any]]] = {}
    plan = settings()
    try:
        for round_no in range(args.rounds):
            for setting, jobs in plan:
                with Sessions(db) as sessions:
                    out = drain(ctx, SYSTEMS["skiplock"], setting, jobs or args.jobs)
                out["sessions"] = sessions.most
                rows.setdefault(setting.label, []).append(out)
                print(
                    f"round {round_no + 1} {setting.label:>8}: {out['jobs_per_s']:,.0f} jobs/s, "
                    f"max claimed-unrecorded {out['max_inflight']}, worker CPU "
                    f"{out['worker_cpu_us_per_job']:.0f} us/job, sessions {sessions.most}"
                    f"{'' if out['verified'] else ' NOT VERIFIED: ' + str(out['problems'])}",
                    flush=True,
                )
    finally:
        db.drop()
    print(f"\n{args.rounds} rounds, medians (min-max):\n")
    print(
        "| setting | what | jobs | jobs/s | max claimed-unrecorded | worker CPU µs/job "
        "| most sessions (bound) | verified |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for setting, jobs in plan:
        outs = rows.get(setting.label, [])
        if not outs:
            continue
        rates = [o["jobs_per_s"] for o in outs]
        print(
            f"| {setting.label} | {setting.notes} | {jobs or args.jobs:,} "
            f"| {statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) "
            f"| {statistics.median(o['max_inflight'] for o in outs):,.0f} "
            f"| {statistics.median(o['worker_cpu_us_per_job'] for o in outs):.0f} "
            f"| {max(o['sessions'] for o in outs)} ({budget(setting)}) "
            f"| {all(o['verified'] for o in outs)} |"
        )
    return 0 if all(o["verified"] for outs in rows.values() for o in outs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
