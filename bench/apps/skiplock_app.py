"""skiplock's side: ``python -m skiplock worker bench.apps.skiplock_app:app``."""

from __future__ import annotations

import asyncio
import os
import time

from skiplock import App, JobContext

from . import work
from .record import record

SCHEMA = "skiplock"
QUEUE = "bench"

app = App(
    os.environ.get("BENCH_DSN") or None,
    SCHEMA,
    completion=os.environ.get("BENCH_COMPLETION", "keep"),  # type: ignore[arg-type]
)

# The task is named "noop" whatever it does, so that every workload enqueues the same way;
# the real-work settings give it work through BENCH_WORK (bench/apps/work.py).
if work.KIND == "sync-io":

    @app.task(name="noop", queue=QUEUE)
    def sleeps(n: int) -> None:
        record(n)
        time.sleep(work.SECONDS)

elif work.KIND == "async-io":

    @app.task(name="noop", queue=QUEUE)
    async def awaits(n: int) -> None:
        record(n)
        await asyncio.sleep(work.SECONDS)

elif work.KIND == "cpu":

    @app.task(name="noop", queue=QUEUE)
    async def burns(n: int) -> None:
        record(n)
        work.burn(work.SECONDS)

elif os.environ.get("BENCH_HANDLER") == "progress":
    # The no-op reporting progress, as a long task would on every step (bench/README.md,
    # "What ctx.progress costs the drain").
    @app.task(name="noop", queue=QUEUE, pass_context=True)
    async def reports(ctx: JobContext, n: int) -> None:
        record(n)
        ctx.progress(0.5, "half way")

elif os.environ.get("BENCH_HANDLER") == "context":
    # The no-op taking its JobContext and doing nothing with it: what pass_context alone costs.
    @app.task(name="noop", queue=QUEUE, pass_context=True)
    async def takes_context(ctx: JobContext, n: int) -> None:
        record(n)

elif os.environ.get("BENCH_HANDLER", "async") == "sync":
    # The same no-op as a plain def: run in the worker's task threads.
    @app.task(name="noop", queue=QUEUE)
    def noop_sync(n: int) -> None:
        record(n)

else:

    @app.task(name="noop", queue=QUEUE)
    async def noop(n: int) -> None:
        record(n)
