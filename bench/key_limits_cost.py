"""What limits per key cost a drain (issue 46, item 2): one worker (concurrency 10, a no-op async
task, a burst) drains --jobs jobs, interleaved in one run, with

  none:       no key has limits (a worker then claims as before: the only cost is a NULL check
              per candidate, which `python -m bench --only drain` against main's tree measures);
  other key:  one key has limits but the jobs have no key: every claim cycle adds the claim of
              limited keys (one transaction, which finds nothing);
  every job:  every job has one limit_key whose limit never binds (concurrency 1000): every job
              goes through the claim of limited keys;
  queue limit: for comparison, no key but a queue concurrency limit that never binds (1000):
              every job goes through the serialised claim of a limited queue.

    python -m bench.key_limits_cost [--dsn ...] [--jobs 5000] [--repeat 3] [--variants none,...]

The ratio column is against the first variant given.

Each run works in a schema of its own, dropped at the end.  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from bench.db import default_dsn
from skiplock import App, Worker

VARIANTS = ("none", "other key", "every job", "queue limit")


def drain(dsn: str, jobs: int, variant: str) -> float:
    app = App(dsn, f"bench_keylim_{os.getpid()}")
    app.migrate()

    @app.task(name="noop", queue="kq")
    async def noop(n: int) -> None: ...

    try:
        if variant in ("other key", "every job"):
            app.sync_client.set_key_limit("k", concurrency=1000)
        if variant == "queue limit":
            app.sync_client.set_concurrency_limit("kq", 1000)
        call = noop.with_options(limit_key="k") if variant == "every job" else noop
        for start in range(0, jobs, 10_000):
            call.enqueue_many([{"n": i} for i in range(start, min(jobs, start + 10_000))])
        began = time.monotonic()
        stats = asyncio.run(Worker(app, burst=True, concurrency=10, poll_interval=0.1).run())
        took = time.monotonic() - began
        assert stats.claimed == jobs, (stats.claimed, jobs)
        return jobs / took
    finally:
        app.sync_client.drop_schema()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    args = parser.parse_args()
    variants = args.variants.split(",")
    rates: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.repeat):
        for variant in variants:  # interleaved
            rates[variant].append(drain(args.dsn, args.jobs, variant))
    base = statistics.median(rates[variants[0]])
    print(f"| keys with limits ({args.jobs:,} jobs, 1 worker) | jobs/s, median (runs) | ratio |")
    print("|---|---|---|")
    for variant in variants:
        med = statistics.median(rates[variant])
        runs = ", ".join(f"{r:,.0f}" for r in rates[variant])
        print(f"| {variant} | {med:,.0f} ({runs}) | {med / base:.2f} |")


if __name__ == "__main__":
    main()
