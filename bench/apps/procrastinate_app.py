"""Procrastinate's side: ``procrastinate --app bench.apps.procrastinate_app.app worker``."""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

from . import work

QUEUE = "bench"

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_DSN", "")))

# Named "noop" whatever it does (see bench/apps/skiplock_app.py); a plain `def` task runs in a
# thread of the worker's event loop's default executor.  The under-load workload defers it to a
# second queue too (``configure(queue=...)``): a worker without --queues serves every queue.
app.task(name="noop", queue=QUEUE)(work.run_sync if work.SYNC else work.run_async)
