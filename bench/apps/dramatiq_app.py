"""Dramatiq's side: ``dramatiq bench.apps.dramatiq_app`` (its own worker: processes x threads).

The broker comes from ``BENCH_DRAMATIQ_BROKER``: its Redis broker for a ``redis://`` URL (the
key namespace from ``BENCH_DRAMATIQ_NAMESPACE``), its RabbitMQ broker for an ``amqp://`` one.
The queue is ``BENCH_DRAMATIQ_QUEUE`` (on RabbitMQ named after the bench's database, as
Celery's is), the under-load workload's other queue that name with ``-other``; the processes,
threads and queues served are the worker's command-line options, the prefetch its
``dramatiq_queue_prefetch`` variable.  No result backend: the handler's record is the outcome
the bench checks.  Dramatiq's worker processes are multiprocessing children, which end without
running ``atexit``: the records are written when the worker has shut down.
"""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

from . import work
from .record import dump

QUEUE = os.environ.get("BENCH_DRAMATIQ_QUEUE", "bench")
OTHER_QUEUE = f"{QUEUE}-other"  # the under-load workload's second queue
BROKER = os.environ.get("BENCH_DRAMATIQ_BROKER", "redis://127.0.0.1:6379/12")


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


def make_broker() -> dramatiq.Broker:
    if BROKER.startswith("amqp"):
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=BROKER)
    from dramatiq.brokers.redis import RedisBroker

    return RedisBroker(url=BROKER, namespace=os.environ.get("BENCH_DRAMATIQ_NAMESPACE", "bench"))


broker = make_broker()
broker.add_middleware(BenchRecords())
dramatiq.set_broker(broker)

# Dramatiq runs actors in its worker threads: every kind of work in a plain def, but the
# async-io work in an async def, which its AsyncIO middleware runs in an event loop thread of
# its own while the worker thread waits (its documented way to run coroutines).
handler: Any = work.run_sync
if work.KIND == "async-io":
    from dramatiq.middleware.asyncio import AsyncIO

    broker.add_middleware(AsyncIO())
    handler = work.run_async
noop = dramatiq.actor(handler, actor_name="noop", queue_name=QUEUE, broker=broker)
if os.environ.get("BENCH_OTHER_QUEUE") == "1":  # declared only where served: an idle consumer
    other = dramatiq.actor(handler, actor_name="other", queue_name=OTHER_QUEUE, broker=broker)
