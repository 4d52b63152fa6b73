"""skiplock's side: ``python -m skiplock worker bench.apps.skiplock_app:app``."""

from __future__ import annotations

import os

from skiplock import App

from .record import record

SCHEMA = "skiplock"
QUEUE = "bench"

app = App(
    os.environ.get("BENCH_DSN") or None,
    SCHEMA,
    completion=os.environ.get("BENCH_COMPLETION", "keep"),  # type: ignore[arg-type]
)


if os.environ.get("BENCH_HANDLER", "async") == "sync":
    # The same no-op as a plain def: run in the worker's task threads.
    @app.task(name="noop", queue=QUEUE)
    def noop(n: int) -> None:
        record(n)

else:

    @app.task(name="noop", queue=QUEUE)
    async def noop(n: int) -> None:
        record(n)
