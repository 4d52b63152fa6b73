"""Two claims pipelined on one connection, against one claim at a time (docs/design.md, "Two
claims in flight: tried, not landed"; issue 47's 20 ms drain, issue 48 item 4).

A backlog of ``--jobs`` no-op jobs on one queue, claimed (nothing run) through a delaying proxy
(:mod:`bench.delay_proxy`, ``--rtts`` round trips) by one connection, three ways interleaved:

- **one at a time**: ``claim(n)``, its jobs back, the next;
- **one at a time, 2n**: the same with claims twice as large;
- **two pipelined**: psycopg's pipeline mode on the one connection, each claim followed by a
  Sync (its own implicit transaction, committed at the Sync), up to two claims on their way:
  the next is sent as soon as the older one's jobs are back, before the younger one returns.
  The server runs them one after the other, so the second's snapshot follows the first's
  commit.

Each run checks that every job was claimed exactly once and that each claim's jobs follow the
previous claim's in the queue's order (no claim took a job older than one a claim sent before
it took).  Prints jobs/s, claims and the round trips' overlap (time per claim).

    python -m bench.pipelined_claims [--dsn ...] [--database skiplock_bench_x]
                                     [--rtts 0,20] [--jobs 20000] [--size 200] [--repeat 3]

The pipelined claim reads results with two of psycopg's private pipeline methods
(``_enqueue_sync``, ``_communicate_gen``): its public API fetches every result queued on the
connection, under the connection's lock, before it returns the first (measured here as
``public API``), which would make the first claim wait for the second.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections import deque
from typing import Any

import psycopg
from psycopg import AsyncConnection

from bench.db import BenchDatabase, default_dsn
from skiplock import App
from skiplock._db.sql import Queries
from skiplock._db.statement_params import claim_statement
from skiplock.job import Job

QUEUE = "pipe"
MODES = ("one at a time", "one at a time, 2n", "two pipelined", "two pipelined, public API")


def _proxy(dsn: str, rtt_ms: float, port: int) -> tuple[subprocess.Popen[str], str]:
    """A delaying proxy in front of the server; the DSN through it."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    target = f"{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}"
    here = os.path.dirname(__file__)
    proc = subprocess.Popen(
        [sys.executable, os.path.join(here, "delay_proxy.py"), "--listen", f"127.0.0.1:{port}",
         "--target", target, "--delay-ms", str(rtt_ms / 2)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    info.update(host="127.0.0.1", port=str(port))
    return proc, psycopg.conninfo.make_conninfo(**info)


def _set_once(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


class Pipe:
    """Claims pipelined on one connection: send any time, read each in its turn."""

    def __init__(self, conn: AsyncConnection[Any], queries: Queries, public: bool) -> None:
        self.conn = conn
        self.queries = queries
        self.public = public
        self.pipeline: Any = None
        self.loop = asyncio.get_running_loop()

    async def send(self, limit: int, schema: str) -> Any:
        name, params = claim_statement([QUEUE], limit, "w", 60.0, None, schema=schema)
        cur = self.conn.cursor(binary=True)
        await cur.execute(self.queries[name], params)  # in pipeline mode: sent, not awaited
        if not self.public:
            async with self.conn.lock:
                self.pipeline._enqueue_sync()  # its own transaction, committed at the Sync
                await self.conn.wait(self.pipeline._communicate_gen())
        return cur

    async def read(self, cur: Any) -> list[Job]:
        if not self.public:
            while cur.pgresult is None:  # wait outside the lock: a send may go meanwhile
                ready: asyncio.Future[None] = self.loop.create_future()
                fd = self.conn.pgconn.socket
                self.loop.add_reader(fd, _set_once, ready)
                try:
                    await ready
                finally:
                    self.loop.remove_reader(fd)
                async with self.conn.lock:
                    await self.conn.wait(self.pipeline._communicate_gen())
        rows = await cur.fetchall()  # the public API: fetches all that is queued first
        if self.public:
            await self.pipeline.sync()
        return [Job.from_claimed_row(r) for r in rows]


async def _drain(dsn: str, schema: str, mode: str, size: int) -> tuple[list[list[Job]], float]:
    queries = Queries(schema)
    claims: list[list[Job]] = []
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT 1")
        began = time.perf_counter()
        if mode.startswith("one at a time"):
            n = size * 2 if mode.endswith("2n") else size
            while True:
                name, params = claim_statement([QUEUE], n, "w", 60.0, None, schema=schema)
                cur = conn.cursor(binary=True)
                await cur.execute(queries[name], params)
                jobs = [Job.from_claimed_row(r) for r in await cur.fetchall()]
                claims.append(jobs)
                if len(jobs) < n:
                    break
        else:
            async with conn.pipeline() as pipeline:
                pipe = Pipe(conn, queries, public=mode.endswith("public API"))
                pipe.pipeline = pipeline
                flight: deque[Any] = deque([await pipe.send(size, schema)])
                done = False
                while flight:
                    if not done and len(flight) < 2:
                        flight.append(await pipe.send(size, schema))
                    jobs = await pipe.read(flight.popleft())
                    claims.append(jobs)
                    done = done or len(jobs) < size
        took = time.perf_counter() - began
    return claims, took


def _check(claims: list[list[Job]], jobs: int) -> str:
    ids = [j.id for c in claims for j in c]
    if len(ids) != jobs or len(set(ids)) != jobs:
        return f"WRONG: {len(ids)} claimed, {len(set(ids))} distinct of {jobs}"
    last = 0
    for c in claims:
        if c and min(j.id for j in c) < last:
            return "OUT OF ORDER"
        if c:
            last = max(j.id for j in c)
    return "ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=default_dsn())
    parser.add_argument("--database", default="skiplock_bench_pipe")
    parser.add_argument("--rtts", default="0,20")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--port", type=int, default=6431)
    args = parser.parse_args(argv)
    db = BenchDatabase(args.dsn, args.database)
    db.recreate()
    schema = "bench_pipe"
    app = App(db.dsn, schema)
    app.migrate()

    @app.task(name="noop", queue=QUEUE)
    async def noop() -> None: ...

    results: dict[tuple[float, str], list[tuple[float, int, str]]] = {}
    try:
        for rtt in [float(x) for x in args.rtts.split(",")]:
            proc, dsn = _proxy(db.dsn, rtt, args.port)
            try:
                for _ in range(args.repeat):
                    for mode in MODES:
                        with psycopg.connect(db.dsn, autocommit=True) as c:
                            c.execute(f"TRUNCATE {schema}.jobs CASCADE")
                            c.execute("VACUUM")
                        for start in range(0, args.jobs, 5000):
                            n = min(5000, args.jobs - start)
                            noop.enqueue_many([{}] * n)
                        claims, took = asyncio.run(_drain(dsn, schema, mode, args.size))
                        verdict = _check(claims, args.jobs)
                        with open("/proc/loadavg") as f:
                            load = f.read().split()[0]
                        results.setdefault((rtt, mode), []).append(
                            (args.jobs / took, len(claims), verdict)
                        )
                        print(f"rtt {rtt:g} ms, {mode}: {args.jobs / took:,.0f} jobs/s, "
                              f"{len(claims)} claims, {took / len(claims) * 1000:.2f} ms a claim,"
                              f" {verdict}, load {load}", flush=True)  # fmt: skip
            finally:
                proc.terminate()
                proc.wait()
    finally:
        app.close()
        db.drop()
    print("\n| RTT ms | mode | jobs/s, median (min-max) | claims | checks |")
    print("|---|---|---|---|---|")
    for (rtt, mode), rows in results.items():
        rates = [r[0] for r in rows]
        verdicts = {r[2] for r in rows}
        print(
            f"| {rtt:g} | {mode} | {statistics.median(rates):,.0f} ({min(rates):,.0f}-"
            f"{max(rates):,.0f}) | {rows[0][1]} | {', '.join(sorted(verdicts))} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
