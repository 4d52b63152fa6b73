"""``skiplock demo``: a small, real run on a throwaway schema (its own schema, dropped after)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter

from rich.console import Console
from rich.table import Table

from .app import App
from .retry import ExponentialBackoff
from .worker import Worker


def build_demo_app(dsn: str | None, schema: str) -> tuple[App, Counter[int]]:
    app = App(dsn, schema)
    runs: Counter[int] = Counter()

    @app.task(
        name="demo.resize_image", max_attempts=3, retry=ExponentialBackoff(base=0.05, cap=0.5)
    )
    async def resize_image(image_id: int, fail_first: bool = False) -> None:
        runs[image_id] += 1
        await asyncio.sleep(0.002)
        if fail_first and runs[image_id] == 1:
            raise RuntimeError(f"image {image_id}: storage timed out (first try)")

    @app.task(
        name="demo.always_fails", max_attempts=3, retry=ExponentialBackoff(base=0.05, cap=0.5)
    )
    def always_fails(reason: str) -> None:
        raise ValueError(reason)

    return app, runs


def run_demo(dsn: str | None, *, jobs: int, workers: int, keep: bool) -> None:
    console = Console()
    schema = f"skiplock_demo_{secrets.token_hex(3)}"
    app, runs = build_demo_app(dsn, schema)
    try:
        app.migrate()
        console.print(
            f"[bold]skiplock demo[/] in schema [cyan]{schema}[/]: {jobs} jobs, {workers} workers"
        )
        app.enqueue_many(
            "demo.resize_image", [{"image_id": i, "fail_first": i % 10 == 0} for i in range(jobs)]
        )
        app.enqueue("demo.always_fails", {"reason": "this job fails on every attempt"})
        started = time.monotonic()
        fleet = [Worker(app, concurrency=4, burst=True, poll_interval=0.05) for _ in range(workers)]
        while True:  # bursts stop at what is due; go again until the retries have come due too
            asyncio.run(_run_all(fleet))
            counts = {status: n for _, status, n in app.sync_client.counts()}
            if not {"scheduled", "pending", "running"} & counts.keys():
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        counts = {status: n for _, status, n in app.sync_client.counts()}
        _report(console, fleet, counts, runs, jobs, elapsed)
    finally:
        if not keep:
            app.sync_client.drop_schema()
        app.close()


async def _run_all(fleet: list[Worker]) -> None:
    await asyncio.gather(*(w.run() for w in fleet))


def _report(
    console: Console,
    fleet: list[Worker],
    counts: dict[str, int],
    runs: Counter[int],
    jobs: int,
    elapsed: float,
) -> None:
    table = Table(title="workers")
    for column in ("worker", "claimed", "done", "retried", "failed"):
        table.add_column(column, justify="right" if column != "worker" else "left")
    for w in fleet:
        s = w.stats
        table.add_row(w.worker_id, str(s.claimed), str(s.done), str(s.retried), str(s.failed))
    console.print(table)
    statuses = Table(title="jobs by status")
    statuses.add_column("status")
    statuses.add_column("jobs", justify="right")
    for status, n in sorted(counts.items()):
        statuses.add_row(status, str(n))
    console.print(statuses)
    twice = sum(1 for n in runs.values() if n > 2)
    console.print(
        f"{jobs} image jobs ran {sum(runs.values())} times in {elapsed:.2f}s "
        f"({jobs / elapsed:.0f} jobs/s); every job accounted for: "
        f"{'yes' if counts.get('done', 0) == jobs and twice == 0 else 'NO'}"
    )
