"""Celery's side: ``celery -A bench.apps.celery_app worker`` (its own worker, any pool).

The broker comes from ``BENCH_CELERY_BROKER`` (Redis or RabbitMQ), ``task_acks_late`` from
``BENCH_CELERY_ACKS_LATE``; the pool, concurrency and prefetch multiplier are the worker's
command-line options.  No result backend: the handler's :func:`record` is the outcome the bench
checks.  A prefork pool's child process ends without running ``atexit`` (billiard leaves through
``os._exit``), so the records are also written on Celery's ``worker_process_shutdown`` signal.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown, worker_ready

from . import work
from .record import dump

# Named after the bench's database, so that two runs at once (another helper's, a test's) never
# share a queue; on Redis every key of the transport (its unacked hash too) gets that prefix.
QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench")

app = Celery("bench", broker=os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/11"))
app.conf.update(
    task_default_queue=QUEUE,
    broker_transport_options={"global_keyprefix": f"{QUEUE}:"},
    task_ignore_result=True,
    task_acks_late=os.environ.get("BENCH_CELERY_ACKS_LATE", "") == "1",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@worker_process_init.connect
def _records_on_sigterm(**_: Any) -> None:
    """A prefork child that the pool terminates on shutdown dies of SIGTERM without any exit
    hook: write its records first."""

    def written_then_default(signum: int, frame: Any) -> None:
        dump()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, written_then_default)


@worker_ready.connect
def _say_ready(**_: Any) -> None:
    """A file the bench waits for before it starts timing enqueues (Celery's start-up takes
    seconds on a loaded machine, and its consumer starts after it)."""
    directory = os.environ.get("BENCH_RECORD_DIR")
    if directory:
        with open(os.path.join(directory, f"{os.getpid()}.ready"), "w"):
            pass


@worker_process_shutdown.connect
def _write_records(**_: Any) -> None:
    dump()


# Celery runs no coroutines: every kind of work in a plain def (async-io in a loop of its own).
noop = app.task(name="noop")(work.run_sync)
