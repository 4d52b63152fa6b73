"""Dramatiq's side: ``dramatiq bench.apps.dramatiq_app`` (its own worker: processes x threads).

The Redis broker comes from ``BENCH_DRAMATIQ_BROKER``, its key namespace from
``BENCH_DRAMATIQ_NAMESPACE`` (named after the bench's database, as Celery's queue is); the
processes, threads and queues are the worker's command-line options, the prefetch its
``dramatiq_queue_prefetch`` variable.  No result backend: the handler's record is the outcome
the bench checks.  Dramatiq's worker processes are multiprocessing children, which end without
running ``atexit``: the records are written when the worker has shut down.
"""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import Middleware

from . import work
from .record import dump

QUEUE = "bench"
OTHER_QUEUE = "other"  # the under-load workload's second queue
BROKER = "redis://127.0.0.1:6379/12"


class BenchRecords(Middleware):
    """Says when a worker process consumes (a file the bench waits for, as Celery's ready
    signal) and writes its records when it has stopped."""

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        directory = os.environ.get("BENCH_RECORD_DIR")
        if directory:
            with open(os.path.join(directory, f"{os.getpid()}.ready"), "w"):
                pass

    def after_worker_shutdown(self, broker: Any, worker: Any) -> None:
        dump()


broker = RedisBroker(
    url=os.environ.get("BENCH_DRAMATIQ_BROKER", BROKER),
    namespace=os.environ.get("BENCH_DRAMATIQ_NAMESPACE", "bench"),
)
broker.add_middleware(BenchRecords())
dramatiq.set_broker(broker)

# Dramatiq runs actors in its worker threads: every kind of work in a plain def (async-io in a
# loop of its own), as Celery's.
noop = dramatiq.actor(work.run_sync, actor_name="noop", queue_name=QUEUE, broker=broker)
if os.environ.get("BENCH_OTHER_QUEUE") == "1":  # declared only where served: an idle consumer
    other = dramatiq.actor(work.run_sync, actor_name="other", queue_name=OTHER_QUEUE, broker=broker)
