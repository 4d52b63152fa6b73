"""How fast due work flows (issue 46, item 1): scheduled jobs drained by one worker, and how
late each job starts after its run_at, with the promotion as it was (one batch of 1,000 a
leader round, rounds a poll interval apart) and as it is (batches until none is due; the leader
sleeps until the next run_at), interleaved in one run.  Times are read on the server's clock.

    python -m bench.due_work [--dsn postgresql://...] [--jobs 4000] [--repeat 3]

Each run works in a schema of its own, dropped at the end.  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from skiplock import App, Worker
from skiplock._db.store_async import AsyncStore
from skiplock._runtime import maintenance
from skiplock._runtime.maintenance import WAITING_RELEASE_INTERVAL, Maintenance

POLL = 1.0  # the worker's default poll interval, which was the leader's round


async def _promote_one_batch(self: AsyncStore, conn: Any, limit: int = 1000) -> dict[str, int]:
    """job_promote_due as it was: one statement a round."""
    rows = await self._rows(
        conn, "job_promote_due", {"limit": limit, "channel": self.queries.channel}
    )
    return {queue: n for queue, n, _ in rows}


async def _round_as_it_was(self: Maintenance) -> None:
    """Maintenance._until_next_round as it was: no promotion between rounds."""
    next_round = time.monotonic() + self.interval
    while self.elector.is_leader and self._jobs_waiting:
        if next_round - time.monotonic() <= WAITING_RELEASE_INTERVAL:
            break
        await asyncio.sleep(WAITING_RELEASE_INTERVAL)
        await self._run_step("release", self._release_waiting)
    await asyncio.sleep(max(0.0, next_round - time.monotonic()))


@contextlib.contextmanager
def as_it_was() -> Iterator[None]:
    saved = AsyncStore.job_promote_due, Maintenance._until_next_round
    AsyncStore.job_promote_due = _promote_one_batch  # type: ignore[method-assign]
    Maintenance._until_next_round = _round_as_it_was  # type: ignore[method-assign]
    try:
        yield
    finally:
        AsyncStore.job_promote_due, Maintenance._until_next_round = saved  # type: ignore[method-assign]


async def _drain(app: App, jobs: int, delay: float) -> dict[str, float]:
    @app.task(name="noop")
    async def noop(n: int) -> None: ...

    worker = Worker(app, concurrency=10, poll_interval=POLL, leader_ttl=1.0)
    task = asyncio.create_task(worker.run())
    try:
        while not (worker.elector and worker.elector.is_leader):
            await asyncio.sleep(0.02)
        # Idle, at a random phase of the leader's rounds (a poll interval apart before).
        await asyncio.sleep(0.3 + random.uniform(0, POLL))
        await noop.with_options(delay=delay).enqueue_many_async([{"n": n} for n in range(jobs)])
        while worker.stats.finished < jobs:
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 60)
    with psycopg.connect(app.dsn) as conn:
        row = conn.execute(
            f"""SELECT extract(epoch FROM max(finished_at) - max(run_at))::float8,
                       extract(epoch FROM min(locked_at - run_at))::float8,
                       extract(epoch FROM percentile_cont(0.5) WITHIN GROUP
                                          (ORDER BY locked_at - run_at))::float8,
                       extract(epoch FROM max(locked_at - run_at))::float8,
                       count(*)
                FROM "{app.schema}".jobs WHERE status = 'done'"""
        ).fetchone()
    assert row is not None and row[4] == jobs, row
    return dict(zip(("drain", "first", "p50", "max"), row[:4], strict=False))


def run_once(dsn: str, jobs: int, delay: float, old: bool) -> dict[str, float]:
    app = App(dsn, f"bench_due_{'old' if old else 'new'}_{int(time.time() * 1000) % 100000}")
    app.migrate()
    try:
        with as_it_was() if old else contextlib.nullcontext():
            return asyncio.run(_drain(app, jobs, delay))
    finally:
        app.sync_client.drop_schema()
        app.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.due_work", description=__doc__)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    assert maintenance.DUE_LOOK_INTERVAL > 0
    cases = [("pending", 0.0), ("delayed 1.5 s", 1.5), ("one job, delayed 0.5 s", 0.5)]
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        for case, delay in cases:
            n = 1 if case.startswith("one") else args.jobs
            for label, old in (("before", True), ("after", False)):
                results.setdefault((case, label), []).append(run_once(args.dsn, n, delay, old))
    print(
        "| jobs | promotion | drain after the last run_at, s | first start late, s "
        "| median start late, s | latest start late, s |"
    )
    print("|---|---|---|---|---|---|")
    for case, _ in cases:
        for label in ("before", "after"):
            runs = results[(case, label)]
            cells = [
                " / ".join(f"{r[key]:.3f}" for r in runs)
                for key in ("drain", "first", "p50", "max")
            ]
            print(f"| {case} | {label} | " + " | ".join(cells) + " |")
    print(
        f"\n(each cell: the {args.repeat} runs in order; median drain after: "
        f"{statistics.median(r['drain'] for r in results[(cases[1][0], 'after')]):.3f} s)"
    )


if __name__ == "__main__":
    main()
