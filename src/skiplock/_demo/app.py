"""The app of ``skiplock demo``'s part 2 (:mod:`skiplock._demo.at_work`): its tasks and queues.

Images and orders go to the fleet: resizes that work, uploads that fail twice before
they work, a warehouse call that always fails.  Exports (lease model) and ledger entries
(held-lock model) are the crash-test jobs: each writes a side effect outside its transaction,
then, in a worker about to be killed, takes its time (``SKIPLOCK_DEMO_STALL`` seconds).

The killed workers run ``python -m skiplock worker skiplock._demo.app:app``; this module builds
that ``app`` from ``SKIPLOCK_DEMO_DSN`` and ``SKIPLOCK_DEMO_SCHEMA``.
"""

from __future__ import annotations

import asyncio
import os
import time
from functools import cache
from typing import Any

import psycopg

from skiplock._db.connections import connect_kwargs
from skiplock._db.demo import DemoStatements
from skiplock.app import App
from skiplock.retry import ExponentialBackoff
from skiplock.task import JobContext

ENV_DSN = "SKIPLOCK_DEMO_DSN"
ENV_SCHEMA = "SKIPLOCK_DEMO_SCHEMA"
ENV_STALL = "SKIPLOCK_DEMO_STALL"  # seconds the crash-test tasks take (set for doomed workers)
APP_SPEC = "skiplock._demo.app:app"
FLEET_QUEUES = ["images", "orders"]
CRASH_QUEUES = ["exports", "ledger"]
BACKOFF = ExponentialBackoff(base=0.25, cap=1.0)


def build_app(dsn: str | None, schema: str) -> App:
    """The demo's tasks on ``schema``: the same in the demo and in its worker processes."""
    app = App(dsn, schema)

    @app.task(name="demo.resize_image", queue="images")
    async def resize_image(image_id: int, ms: int) -> None:
        await asyncio.sleep(ms / 1000)

    @app.task(name="demo.upload_thumbnail", queue="images", retry=BACKOFF, pass_context=True)
    async def upload_thumbnail(ctx: JobContext, image_id: int, failures: int) -> None:
        await asyncio.sleep(0.002)
        if ctx.job.attempts <= failures:
            raise ConnectionError(f"image {image_id}: storage timed out")

    @app.task(name="demo.send_receipt", queue="orders")
    async def send_receipt(order_id: int) -> None:
        await asyncio.sleep(0.001)

    @app.task(name="demo.notify_warehouse", queue="orders", max_attempts=3, retry=BACKOFF)
    async def notify_warehouse(order_id: int) -> None:
        raise RuntimeError(f"order {order_id}: warehouse API answered 503")

    @app.task(name="demo.export_report", queue="exports", model="lease", pass_context=True)
    def export_report(ctx: JobContext, report_id: int) -> None:
        _side_effect(app, ctx)

    @app.task(name="demo.post_ledger", queue="ledger", model="held", pass_context=True)
    def post_ledger(ctx: JobContext, entry_id: int) -> None:
        _side_effect(app, ctx)

    return app


def _side_effect(app: App, ctx: JobContext) -> None:
    """Write a row outside the job's transaction (as an e-mail sent or a file uploaded would
    be), then, in a worker that is about to be killed, take a long time."""
    with psycopg.connect(app.dsn, **connect_kwargs(app.dsn)) as conn:
        DemoStatements(app.queries).demo_effect_record(
            conn, job=ctx.job.id, attempt=ctx.job.attempts, pid=os.getpid()
        )
    deadline = time.monotonic() + float(os.environ.get(ENV_STALL) or 0)
    while time.monotonic() < deadline and not ctx.cancelled.is_set():
        time.sleep(0.05)


@cache
def _app_from_env() -> App:
    return build_app(os.environ[ENV_DSN], os.environ[ENV_SCHEMA])


def __getattr__(name: str) -> Any:
    """``app``, built on first use from the environment (for ``skiplock worker``)."""
    if name == "app":
        return _app_from_env()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
