"""Procrastinate's side: ``procrastinate --app bench.apps.procrastinate_app.app worker``."""

from __future__ import annotations

import asyncio
import os
import time

from procrastinate import App, PsycopgConnector

from . import work
from .record import record

QUEUE = "bench"

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_DSN", "")))

# Named "noop" whatever it does (see bench/apps/skiplock_app.py); a plain `def` task runs in a
# thread of the worker's event loop's default executor.
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

else:

    @app.task(name="noop", queue=QUEUE)
    async def noop(n: int) -> None:
        record(n)
