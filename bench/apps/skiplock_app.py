"""skiplock's side: ``python -m skiplock worker bench.apps.skiplock_app:app``."""

from __future__ import annotations

import os

from skiplock import App, JobContext

from . import work

SCHEMA = "skiplock"
QUEUE = "bench"
OTHER_QUEUE = "other"  # the under-load workload's second queue

app = App(
    os.environ.get("BENCH_DSN") or None,
    SCHEMA,
    completion=os.environ.get("BENCH_COMPLETION", "keep"),  # type: ignore[arg-type]
)

# The task is named "noop" whatever it does, so that every workload enqueues the same way;
# the real-work settings give it work through BENCH_WORK, and BENCH_HANDLER=sync makes the
# no-op a plain def, run in the worker's task threads (bench/apps/work.py).
handler = work.run_sync if work.SYNC else work.run_async
if os.environ.get("BENCH_HANDLER") == "progress":
    # The no-op reporting progress, as a long task would on every step (bench/README.md,
    # "What ctx.progress costs the drain").
    @app.task(name="noop", queue=QUEUE, pass_context=True)
    async def reports(ctx: JobContext, n: int) -> None:
        await work.run_async(n)
        ctx.progress(0.5, "half way")

elif os.environ.get("BENCH_HANDLER") == "context":
    # The no-op taking its JobContext and doing nothing with it: what pass_context alone costs.
    @app.task(name="noop", queue=QUEUE, pass_context=True)
    async def takes_context(ctx: JobContext, n: int) -> None:
        await work.run_async(n)

else:
    app.task(name="noop", queue=QUEUE)(handler)
if os.environ.get("BENCH_OTHER_QUEUE") == "1":  # only there: the worker serves all its queues
    app.task(name="other", queue=OTHER_QUEUE)(handler)
