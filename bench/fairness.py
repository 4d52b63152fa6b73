"""Fair shares (issue 46, item 2): how long small tenants and small queues wait behind a big
backlog, with skiplock as it was (a source tree given by --base, e.g. main's) and as it is
(this tree), interleaved in one run.  Each measurement runs in a subprocess whose import path
starts with the tree measured.

  tenants: one tenant's --big jobs enqueued first, then --tenants tenants with --small jobs
           each, all in one queue, drained by one worker (concurrency 10, a no-op async task).
           As it was: the jobs have no fair_key (there was none); as it is: each tenant's jobs
           have its name as their fair_key.  Reported: when the last small tenant's job ran,
           and when the whole backlog was drained, in seconds from the worker's start.
  queues:  queue a's --queue-a jobs (enqueued first), then queue b's 5, drained by one worker
           serving [a, b]: how many of a's jobs ran before b's last.

    python -m bench.fairness --base /work/tmp/fair-base/src [--dsn ...] [--repeat 2]

Each run works in a schema of its own, dropped at the end.  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def measure_tenants(dsn: str, big: int, tenants: int, small: int, keyed: bool) -> dict[str, Any]:
    from skiplock import App, Worker

    schema = f"bench_fair_{os.getpid()}"
    app = App(dsn, schema)
    app.migrate()
    ran_small: list[float] = []
    last_any = [0.0]

    @app.task(name="work", queue="fq")
    async def work(tenant: str) -> None:
        now = time.monotonic()
        last_any[0] = now
        if tenant != "big":
            ran_small.append(now)

    def call(tenant: str) -> Any:
        return work.with_options(fair_key=tenant) if keyed else work

    try:
        for start in range(0, big, 10_000):
            call("big").enqueue_many([{"tenant": "big"}] * min(10_000, big - start))
        for t in range(tenants):
            call(f"t{t}").enqueue_many([{"tenant": f"t{t}"}] * small)
        worker = Worker(app, burst=True, concurrency=10, poll_interval=0.1)
        began = time.monotonic()
        asyncio.run(worker.run())
        assert len(ran_small) == tenants * small, len(ran_small)
        return {"small_done": max(ran_small) - began, "all_done": last_any[0] - began}
    finally:
        app.sync_client.drop_schema()
        app.close()


def measure_queues(dsn: str, queue_a: int) -> dict[str, Any]:
    from skiplock import App, Worker

    schema = f"bench_fairq_{os.getpid()}"
    app = App(dsn, schema)
    app.migrate()
    order: list[str] = []

    @app.task(name="ta", queue="a")
    async def ta() -> None:
        order.append("a")

    @app.task(name="tb", queue="b")
    async def tb() -> None:
        order.append("b")

    try:
        for start in range(0, queue_a, 10_000):
            ta.enqueue_many([{}] * min(10_000, queue_a - start))
        tb.enqueue_many([{}] * 5)
        asyncio.run(Worker(app, queues=["a", "b"], burst=True, concurrency=10).run())
        last_b = max(i for i, q in enumerate(order) if q == "b")
        return {"a_before_last_b": last_b - 4}
    finally:
        app.sync_client.drop_schema()
        app.close()


def _child(args: argparse.Namespace) -> None:
    if args.scenario == "tenants":
        result = measure_tenants(args.dsn, args.big, args.tenants, args.small, args.keyed)
    else:
        result = measure_queues(args.dsn, args.queue_a)
    print(json.dumps(result))


def _run(tree: str, args: argparse.Namespace, scenario: str, keyed: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE.parent}"}
    command = [
        sys.executable, "-m", "bench.fairness", "--child", scenario, "--dsn", args.dsn,
        "--big", str(args.big), "--tenants", str(args.tenants), "--small", str(args.small),
        "--queue-a", str(args.queue_a),
    ]  # fmt: skip
    if keyed:
        command.append("--keyed")
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("SKIPLOCK_DATABASE_URL", DEFAULT_DSN))
    parser.add_argument("--base", help="the src folder of skiplock as it was (e.g. main's)")
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--queue-a", type=int, default=3_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", choices=["tenants", "queues"], dest="scenario")
    parser.add_argument("--keyed", action="store_true")
    args = parser.parse_args()
    if args.scenario:
        _child(args)
        return
    if not args.base:
        parser.error("--base: the src folder of the tree to compare with")
    mine = str(HERE.parent / "src")
    rows: dict[str, list[dict[str, Any]]] = {"was": [], "is": []}
    queue_rows: dict[str, list[dict[str, Any]]] = {"was": [], "is": []}
    for _ in range(args.repeat):  # interleaved: was, is, was, is
        for label, tree, keyed in (("was", args.base, False), ("is", mine, True)):
            rows[label].append(_run(tree, args, "tenants", keyed))
            queue_rows[label].append(_run(tree, args, "queues", False))
    med = statistics.median
    print(
        f"| tree | last of {args.tenants}x{args.small} small tenants' jobs ran (s) | "
        f"all {args.big + args.tenants * args.small:,} drained (s) | "
        f"queue a's jobs before queue b's last (of {args.queue_a:,}) |"
    )
    print("|---|---|---|---|")
    for label in ("was", "is"):
        small = [r["small_done"] for r in rows[label]]
        every = [r["all_done"] for r in rows[label]]
        before = [r["a_before_last_b"] for r in queue_rows[label]]
        print(
            f"| {label} | {med(small):.2f} ({', '.join(f'{x:.2f}' for x in small)}) | "
            f"{med(every):.2f} ({', '.join(f'{x:.2f}' for x in every)}) | "
            f"{med(before):.0f} ({', '.join(str(x) for x in before)}) |"
        )


if __name__ == "__main__":
    main()
