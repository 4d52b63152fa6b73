"""What the enqueue's NOTIFY costs many producers (issue 46, item 4): producers on their own
connections, each enqueueing one job per commit as fast as it can, for a few seconds, in three
cases interleaved in one run:

- **notify every commit**: a session marks itself idle on the queue, as a waiting worker's
  listener does, so every enqueue notifies (what every enqueue did before);
- **no idle worker**: nobody is marked idle (the workers are busy or absent): no enqueue
  notifies;
- **a worker draining**: one worker (concurrency 10) runs the jobs as they come, marking itself
  idle when its queue runs dry; the notifications it was sent are counted by a listener.

    python -m bench.notify_cost [--dsn ...] [--database skiplock_bench_x] [--producers 8,32]
                                [--seconds 5] [--repeat 3]

The producers run in 4 processes (threads inside), so the client's CPU is spread.  Each run
works in a schema of its own, dropped at the end.  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import threading
import time
from typing import Any

import psycopg
from psycopg import conninfo

from skiplock import App, Worker

PROCESSES = 4
CASES = ("notify every commit", "no idle worker", "a worker draining")


def _producers(dsn: str, schema: str, threads: int, seconds: float, go: Any, out: Any) -> None:
    """One process's producers: ``threads`` connections enqueueing for ``seconds`` from ``go``."""
    app = App(dsn, schema)

    @app.task(name="noop", queue="q")
    async def noop() -> None: ...

    counts = [0] * threads
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(threads)]
    out.put("ready")
    go.wait()
    stop = time.monotonic() + seconds

    def produce(i: int) -> None:
        while time.monotonic() < stop:
            noop.enqueue(conn=conns[i])
            counts[i] += 1

    workers = [threading.Thread(target=produce, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    for conn in conns:
        conn.close()
    app.close()
    out.put(sum(counts))


def _enqueue_rate(dsn: str, schema: str, producers: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Event()
    procs = []
    for p in range(PROCESSES):
        threads = producers // PROCESSES + (1 if p < producers % PROCESSES else 0)
        procs.append(ctx.Process(target=_producers, args=(dsn, schema, threads, seconds, go, out)))
    for proc in procs:
        proc.start()
    for _ in procs:
        assert out.get() == "ready"  # every process started, every connection open
    go.set()
    total = sum(out.get() for _ in procs)
    for proc in procs:
        proc.join()
    return total / seconds


def run_case(dsn: str, case: str, producers: int, seconds: float) -> tuple[float, float]:
    """Jobs enqueued per second, and notifications heard per 1,000 jobs."""
    schema = f"bench_notify_{int(time.time() * 1000) % 10_000_000}"
    app = App(dsn, schema)
    app.migrate()

    @app.task(name="noop", queue="q")
    async def noop() -> None: ...

    try:
        with psycopg.connect(dsn, autocommit=True) as listening:
            listening.execute(app.queries["channel_listen"])
            if case == CASES[0]:
                listening.execute(
                    app.queries["channel_idle_hold"],
                    {"channel": app.queries.channel, "queues": ["q"]},
                )
            heard = [0]
            done = threading.Event()

            def count() -> None:
                while not done.is_set():
                    heard[0] += sum(1 for _ in listening.notifies(timeout=0.2))

            counting = threading.Thread(target=count)
            counting.start()
            try:
                if case == CASES[2]:
                    rate = asyncio.run(_with_worker(app, dsn, schema, producers, seconds))
                else:
                    rate = _enqueue_rate(dsn, schema, producers, seconds)
                time.sleep(0.5)  # the last notifications delivered
            finally:
                done.set()
                counting.join()
        return rate, 1000 * heard[0] / (rate * seconds)
    finally:
        app.sync_client.drop_schema()
        app.close()


async def _with_worker(app: App, dsn: str, schema: str, producers: int, seconds: float) -> float:
    worker = Worker(app, queues=["q"], concurrency=10)
    running = asyncio.create_task(worker.run())
    try:
        while worker.listener is None or not worker.listener.listening.is_set():
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        return await asyncio.to_thread(_enqueue_rate, dsn, schema, producers, seconds)
    finally:
        worker.stop()
        await running


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.notify_cost", description=__doc__)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--database", default=None, help="run in this database (created)")
    parser.add_argument("--producers", default="8,32")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    dsn = args.dsn
    if args.database:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if not conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [args.database]
            ).fetchone():
                conn.execute(f'CREATE DATABASE "{args.database}"')
        dsn = conninfo.make_conninfo(dsn, dbname=args.database)
    counts = [int(n) for n in args.producers.split(",")]
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for _ in range(args.repeat):
        for producers in counts:
            for case in CASES:
                results.setdefault((producers, case), []).append(
                    run_case(dsn, case, producers, args.seconds)
                )
    print(
        "| producers | case | enqueues/s, median (min-max) | ratio to notify every commit "
        "| notifications per 1,000 jobs |"
    )
    print("|---|---|---|---|---|")
    for producers in counts:
        base = statistics.median(r for r, _ in results[(producers, CASES[0])])
        for case in CASES:
            runs = results[(producers, case)]
            rates = [r for r, _ in runs]
            median = statistics.median(rates)
            print(
                f"| {producers} | {case} | {median:,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) "
                f"| {median / base:.2f}x | {statistics.median(n for _, n in runs):.0f} |"
            )


if __name__ == "__main__":
    main()
