"""Procrastinate's side: ``procrastinate --app bench.apps.procrastinate_app.app worker``."""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

from .record import record

QUEUE = "bench"

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_DSN", "")))


@app.task(name="noop", queue=QUEUE)
async def noop(n: int) -> None:
    record(n)
