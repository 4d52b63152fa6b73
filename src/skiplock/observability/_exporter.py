"""``skiplock metrics``: the queues' depth and the age of their oldest due job, from the database,
for Prometheus, once per cluster (run one exporter; the workers export what they do).

Each scrape runs one statement, the one behind ``skiplock status`` (``queue_status`` in
runtime.sql), and turns its rows into gauges; nothing is kept between scrapes:

- ``skiplock_queue_jobs{queue, status}``: jobs ``pending`` (due), ``scheduled``, ``waiting``
  (for other jobs), ``running`` (exact) and ``failed`` (exact while the jobs table is small,
  else estimated from a sample of its pages: docs/design.md, "Status counts that do not read
  the whole table").
- ``skiplock_queue_oldest_due_job_age_seconds{queue}``: how long the oldest due job not running
  has been due (0: none).
- ``skiplock_queue_workers{queue}``: live workers that claim from the queue.
- ``skiplock_queue_paused{queue}``: 1 while the queue is paused.
- ``skiplock_exporter_database_up``: 1 if the statement ran, 0 if it failed (then the queue
  series are absent from that scrape).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click
import psycopg

from skiplock._cli.common import dsn_option, read_dsn_option, schema_option
from skiplock.app import App
from skiplock.errors import SkiplockError
from skiplock.observability.metrics import require_client

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("skiplock.observability.metrics")

DEFAULT_PORT = 9638
DEPTH_STATUSES = ("pending", "scheduled", "waiting", "running", "failed")


class QueueCollector:
    """Queue depth per queue and state, read at each scrape."""

    def __init__(self, app: App) -> None:
        require_client()
        self.app = app

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        up = GaugeMetricFamily(
            "skiplock_exporter_database_up",
            "1 if the exporter's last read of the queues succeeded, else 0.",
        )
        try:
            reader = self.app.read_sync_client
            rows: list[dict[str, Any]] = reader.queue_status()
            lag = reader.read_lag() if self.app.read_dsn is not None else None
        except (psycopg.Error, SkiplockError, OSError) as exc:
            log.warning("could not read the queues: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        jobs = GaugeMetricFamily(
            "skiplock_queue_jobs", "Jobs in the queue, by state.", labels=["queue", "status"]
        )
        oldest = GaugeMetricFamily(
            "skiplock_queue_oldest_due_job_age_seconds",
            "Seconds since the queue's oldest due job (not running) was due; 0 if none is.",
            labels=["queue"],
        )
        workers = GaugeMetricFamily(
            "skiplock_queue_workers", "Live workers claiming from the queue.", labels=["queue"]
        )
        paused = GaugeMetricFamily(
            "skiplock_queue_paused", "1 while the queue is paused.", labels=["queue"]
        )
        for row in rows:
            queue = row["queue"]
            for status in DEPTH_STATUSES:
                jobs.add_metric([queue, status], row[status])
            oldest.add_metric([queue], max(0.0, row["oldest_pending_seconds"] or 0.0))
            workers.add_metric([queue], row["workers"])
            paused.add_metric([queue], 1 if row["paused"] else 0)
        yield from (jobs, oldest, workers, paused)
        if lag is not None:  # read from a standby (--read-dsn): how stale the figures are
            behind = GaugeMetricFamily(
                "skiplock_exporter_read_lag_seconds",
                "Seconds the standby the exporter reads from is behind the primary (NaN: "
                "unknown, it replayed nothing since it started).",
            )
            seconds = lag["lag_seconds"] if lag["standby"] else 0.0
            behind.add_metric([], float("nan") if seconds is None else seconds)
            yield behind


@click.command("metrics")
@dsn_option
@read_dsn_option
@schema_option
@click.option(
    "--port",
    envvar="SKIPLOCK_EXPORTER_PORT",
    show_envvar=True,
    type=click.IntRange(1, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port of the /metrics endpoint.",
)
@click.option(
    "--addr",
    envvar="SKIPLOCK_EXPORTER_ADDR",
    show_envvar=True,
    default="127.0.0.1",
    show_default=True,
    help="Address it listens on (0.0.0.0: every interface).",
)
def command(dsn: str | None, read_dsn: str | None, schema: str, port: int, addr: str) -> None:
    """Export queue depth and the oldest due job's age per queue for Prometheus, read from the
    database at each scrape (run one per cluster), until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    from prometheus_client import CollectorRegistry, start_http_server

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    app = App(dsn, schema, read_dsn=read_dsn)
    try:
        registry = CollectorRegistry()
        registry.register(QueueCollector(app))
        try:
            server, _ = start_http_server(port, addr, registry=registry)
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}"
            ) from None
        shown = f"[{addr}]" if ":" in addr else addr
        log.info("serving queue metrics of schema %s on http://%s:%d/metrics", schema, shown, port)
        stop.wait()
        server.shutdown()
        server.server_close()
    finally:
        app.close()
