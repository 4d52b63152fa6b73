"""What limits per key in held-lock workers and priority aging cost a drain (issue 46, items 2
and 3): one burst worker (concurrency 10, a no-op async task) drains --jobs jobs, the variants
interleaved in one run:

  held none:        a held-lock worker, no key has limits (its claims are those of before);
  held other key:   a held-lock worker, one key has limits but the jobs have no key: every
                    slot's claim first runs the claim of limited keys (a guard transaction
                    that finds none);
  held every job:   a held-lock worker, every job has one limit_key whose limit never binds
                    (concurrency 1000): every job goes through the held-lock claim of its key;
  lease every job:  the same jobs drained by a leased worker (its count of the key now adds the
                    key's held-lock slots);
  lease aging off:  a leased worker (not a burst: it leads, so its maintenance rounds run
                    every 0.1 s while it drains; it stops once every job is done), half the
                    jobs of priority 0 and half of priority 5;
  lease aging on:   the same with an aging step of 0.01 s: the leader rewrites the priority-5
                    jobs at every round (up to 1,000 a round) until they reach priority 0, the
                    most aging can cost.

    python -m bench.held_key_limits_cost [--dsn ...] [--database skiplock_bench_x]
        [--jobs 5000] [--repeat 3] [--variants "held none,held other key"]

The ratio column is against the first variant given.  Each drain works in a schema of its own
in --database (created, and dropped at the end).  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from bench.db import BenchDatabase
from skiplock import App, Worker

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
VARIANTS = (
    "held none",
    "held other key",
    "held every job",
    "lease every job",
    "lease aging off",
    "lease aging on",
)


async def run_until_done(worker: Worker, jobs: int) -> Any:
    task = asyncio.create_task(worker.run())
    while worker.stats.done < jobs and not task.done():
        await asyncio.sleep(0.01)
    worker.stop()
    return await task


def drain(dsn: str, jobs: int, variant: str) -> tuple[float, int]:
    """Jobs/s of the drain, and how many jobs the leader aged."""
    app = App(dsn, f"bench_heldkey_{os.getpid()}")
    app.migrate()

    @app.task(name="noop", queue="kq")
    async def noop(n: int) -> None: ...

    try:
        if variant in ("held other key", "held every job", "lease every job"):
            app.sync_client.set_key_limit("k", concurrency=1000)
        if variant == "lease aging on":
            app.sync_client.set_aging("kq", 0.01)
        call = noop.with_options(limit_key="k") if variant.endswith("every job") else noop
        aging = variant.startswith("lease aging")
        for start in range(0, jobs, 10_000):
            payloads = [{"n": i} for i in range(start, min(jobs, start + 10_000))]
            if aging:  # two priorities, interleaved in time
                call.with_options(priority=5).enqueue_many(payloads[1::2])
                call.enqueue_many(payloads[::2])
            else:
                call.enqueue_many(payloads)
        model = "held" if variant.startswith("held") else "lease"
        worker = Worker(app, burst=not aging, concurrency=10, poll_interval=0.1, model=model)
        began = time.monotonic()
        stats = asyncio.run(run_until_done(worker, jobs) if aging else worker.run())
        took = time.monotonic() - began
        assert stats.claimed == jobs, (stats.claimed, jobs)
        maintenance = worker.maintenance
        aged = getattr(maintenance.stats, "aged", 0) if maintenance is not None else 0
        return jobs / took, aged
    finally:
        app.sync_client.drop_schema()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("SKIPLOCK_DATABASE_URL", DEFAULT_DSN))
    parser.add_argument("--database", default="skiplock_bench")
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    args = parser.parse_args()
    variants = args.variants.split(",")
    database = BenchDatabase(args.dsn, args.database)
    database.recreate()
    rates: dict[str, list[float]] = {v: [] for v in variants}
    aged: dict[str, list[int]] = {v: [] for v in variants}
    try:
        for _ in range(args.repeat):
            for variant in variants:  # interleaved
                rate, n = drain(database.dsn, args.jobs, variant)
                rates[variant].append(rate)
                aged[variant].append(n)
    finally:
        database.drop()
    base = statistics.median(rates[variants[0]])
    print(f"| variant ({args.jobs:,} jobs, 1 worker) | jobs/s, median (runs) | ratio | aged |")
    print("|---|---|---|---|")
    for variant in variants:
        med = statistics.median(rates[variant])
        runs = ", ".join(f"{r:,.0f}" for r in rates[variant])
        print(
            f"| {variant} | {med:,.0f} ({runs}) | {med / base:.2f} | "
            f"{', '.join(str(n) for n in aged[variant])} |"
        )


if __name__ == "__main__":
    main()
