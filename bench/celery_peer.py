"""Celery as a peer: its own worker (bench/apps/celery_app.py) on Redis or RabbitMQ."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from .db import BenchDatabase
from .system_base import PY, Brokered, Producer, Setting, check


class _CeleryProducer(Producer):
    """Celery has no async API and no bulk send: ``send_task`` per job, on one producer."""

    def __init__(self, app: Any, other_queue: str) -> None:
        self.app = app
        self.other_queue = other_queue

    async def one(self, n: int) -> None:
        self.app.send_task("noop", kwargs={"n": n})

    async def other(self, n: int) -> None:
        self.app.send_task("noop", kwargs={"n": n}, queue=self.other_queue)

    async def many(self, numbers: Sequence[int]) -> None:
        with self.app.producer_or_acquire() as producer:
            for n in numbers:
                self.app.send_task("noop", kwargs={"n": n}, producer=producer)

    async def close(self) -> None:
        self.app.close()


@dataclass
class CeleryRedis(Brokered):
    """Celery's own worker on a Redis broker (``$BENCH_CELERY_REDIS``, default
    ``redis://127.0.0.1:6379/11``); its queue and keys are named after the bench's database
    and deleted before every run."""

    name: ClassVar[str] = "celery-redis"
    packages: ClassVar[tuple[str, ...]] = ("celery", "redis")
    broker_env: ClassVar[str] = "BENCH_CELERY_REDIS"
    default_broker: ClassVar[str] = "redis://127.0.0.1:6379/11"

    queue: str = "bench-probe"  # set by install(): named after the bench's database

    @property
    def other_queue(self) -> str:
        return f"{self.queue}-other"

    def app(self) -> Any:
        from celery import Celery

        app = Celery("bench", broker=self.broker, set_as_current=False)
        app.conf.task_default_queue = self.queue  # as bench/apps/celery_app.py's
        app.conf.broker_transport_options = {"global_keyprefix": f"{self.queue}:"}
        return app

    def _redis(self) -> Any:
        import redis

        return redis.Redis.from_url(self.broker, socket_timeout=5)

    def install(self, db: BenchDatabase | None) -> None:
        self.queue = f"bench-{db.name}" if db else "bench-probe"
        self.forget()

    def depth(self) -> tuple[int, int]:
        """(messages waiting in the queue, messages delivered and not acknowledged)."""
        with self._redis() as r:
            prefix = f"{self.queue}:"
            waiting = r.llen(prefix + self.queue) + r.llen(prefix + self.other_queue)
            return int(waiting), int(r.hlen(prefix + "unacked"))

    def unfinished(self, started: int, expected: int) -> bool:
        return started < expected or self.depth() != (0, 0)

    def ready(self, record_dir: Path, setting: Setting) -> bool:
        # one `celery worker` command per setting, whose main process says it is ready
        return any(record_dir.glob("*.ready"))

    def inflight(self) -> int:
        return self.depth()[1]

    async def producer(self, db: BenchDatabase) -> Producer:
        return _CeleryProducer(self.app(), self.other_queue)

    def worker_commands(self, db: BenchDatabase, setting: Setting) -> list[list[str]]:
        queues = [self.queue, self.other_queue] if setting.other_queue else [self.queue]
        cmd = [PY, "-m", "celery", "-A", "bench.apps.celery_app", "worker", "-Q", ",".join(queues)]
        cmd += ["--pool", setting.pool or "prefork"]
        if setting.concurrency is not None:
            cmd += ["--concurrency", str(setting.concurrency)]
        if setting.prefetch is not None:
            cmd += ["--prefetch-multiplier", str(setting.prefetch)]
        # Its documented optimisations for a worker that needs no cluster events.
        cmd += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        cmd += ["--loglevel", (setting.log_level or "WARNING").upper()]
        return [cmd + list(setting.extra)]

    def worker_env(self, setting: Setting) -> dict[str, str]:
        return {
            "BENCH_CELERY_BROKER": self.broker,
            "BENCH_CELERY_QUEUE": self.queue,
            "BENCH_CELERY_ACKS_LATE": "1" if setting.acks_late else "",
        }

    def verify(self, conn: psycopg.Connection[Any], expected: int, setting: Setting) -> list[str]:
        problems: list[str] = []
        check(problems, "messages left (queued, unacknowledged)", self.depth(), (0, 0))
        self.forget()  # every run has a queue of its own: none is left behind in the broker
        return problems

    def forget(self) -> None:
        with self._redis() as r:
            for key in r.scan_iter(match=f"{self.queue}:*"):
                r.delete(key)


@dataclass
class CeleryRabbit(CeleryRedis):
    """Celery's own worker on RabbitMQ (``$BENCH_CELERY_AMQP``, default guest on localhost);
    the queue is purged before every run."""

    name: ClassVar[str] = "celery-rabbitmq"
    packages: ClassVar[tuple[str, ...]] = ("celery",)  # its kombu speaks AMQP itself
    broker_env: ClassVar[str] = "BENCH_CELERY_AMQP"
    default_broker: ClassVar[str] = "amqp://guest:guest@127.0.0.1:5672//"

    def install(self, db: BenchDatabase | None) -> None:
        import kombu

        self.queue = f"bench-{db.name}" if db else "bench-probe"
        with kombu.Connection(self.broker, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1)  # a broker that is not there: fail at once
            for queue in (self.queue, self.other_queue):
                kombu.Queue(queue, channel=conn.default_channel).declare()
                conn.default_channel.queue_purge(queue)

    def forget(self) -> None:
        import kombu

        with kombu.Connection(self.broker, connect_timeout=5) as conn:
            for queue in (self.queue, self.other_queue):
                conn.default_channel.queue_delete(queue)

    def depth(self) -> tuple[int, int]:
        """(messages ready in the queue, 0: RabbitMQ does not say how many are unacknowledged
        without its management API; a stopped worker's unacknowledged ones return to ready)."""
        import kombu

        with kombu.Connection(self.broker, connect_timeout=5) as conn:
            counts = [
                conn.default_channel.queue_declare(queue, passive=True).message_count
                for queue in (self.queue, self.other_queue)
            ]
            return int(sum(counts)), 0
