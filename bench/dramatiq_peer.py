"""Dramatiq as a peer: its own worker (``dramatiq bench.apps.dramatiq_app``) on its Redis or its
RabbitMQ broker (the app picks the broker class from the URL's scheme)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from .db import BenchDatabase
from .system_base import PY, Brokered, Producer, Setting, check


class _DramatiqProducer(Producer):
    """Dramatiq has no async API and no bulk send: ``send`` per job (Redis: one Lua script
    call; RabbitMQ: one publish, unconfirmed, as its broker's default)."""

    def __init__(self, broker: Any, queue: str, other_queue: str) -> None:
        import dramatiq

        def noop(n: int) -> None:  # the producer never runs it
            return None

        self.broker = broker
        self.task = dramatiq.actor(noop, actor_name="noop", queue_name=queue, broker=broker)
        self.other_task = dramatiq.actor(
            noop, actor_name="other", queue_name=other_queue, broker=broker
        )

    async def one(self, n: int) -> None:
        self.task.send(n=n)

    async def many(self, numbers: Sequence[int]) -> None:
        for n in numbers:
            self.task.send(n=n)

    async def other(self, n: int) -> None:
        self.other_task.send(n=n)

    async def close(self) -> None:
        self.broker.close()


@dataclass
class DramatiqRedis(Brokered):
    """Dramatiq's worker on its Redis broker (``$BENCH_DRAMATIQ_REDIS``, default
    ``redis://127.0.0.1:6379/12``); its keys are in a namespace named after the bench's
    database, deleted before and after every run."""

    name: ClassVar[str] = "dramatiq-redis"
    packages: ClassVar[tuple[str, ...]] = ("dramatiq", "redis")
    broker_env: ClassVar[str] = "BENCH_DRAMATIQ_REDIS"
    default_broker: ClassVar[str] = "redis://127.0.0.1:6379/12"

    namespace: str = "bench-probe"  # set by install(): named after the bench's database
    queue: str = "bench"  # the namespace keeps runs apart: one name for every run

    @property
    def queues(self) -> tuple[str, str]:
        """The busy queue and the under-load workload's other one."""
        return self.queue, f"{self.queue}-other"

    def _redis(self) -> Any:
        import redis

        return redis.Redis.from_url(self.broker, socket_timeout=5)

    def install(self, db: BenchDatabase | None) -> None:
        self.namespace = f"bench-{db.name}" if db else "bench-probe"
        self.forget()

    def forget(self) -> None:
        with self._redis() as r:
            for key in r.scan_iter(match=f"{self.namespace}:*"):
                r.delete(key)

    def depth(self) -> tuple[int, int, int]:
        """(messages waiting in the queues, delivered and not acknowledged, dead-lettered).
        A message's body stays in ``<queue>.msgs`` from its enqueue to its ack."""
        with self._redis() as r:
            waiting = unacked = dead = 0
            for queue in self.queues:
                key = f"{self.namespace}:{queue}"
                queued = int(r.llen(key))
                waiting += queued
                unacked += int(r.hlen(key + ".msgs")) - queued
                dead += int(r.zcard(key + ".XQ"))
            return waiting, unacked, dead

    def unfinished(self, started: int, expected: int) -> bool:
        return started < expected or self.depth()[:2] != (0, 0)

    def inflight(self) -> int:
        return self.depth()[1]

    def ready(self, record_dir: Path, setting: Setting) -> bool:
        # each worker process says so once its consumers run
        return len(list(record_dir.glob("*.ready"))) >= setting.processes

    def make_broker(self) -> Any:
        from dramatiq.brokers.redis import RedisBroker

        return RedisBroker(url=self.broker, namespace=self.namespace)

    async def producer(self, db: BenchDatabase) -> Producer:
        return _DramatiqProducer(self.make_broker(), *self.queues)

    def worker_commands(self, db: BenchDatabase, setting: Setting) -> list[list[str]]:
        cmd = [PY, "-m", "dramatiq", "bench.apps.dramatiq_app"]
        cmd += ["--processes", str(setting.processes)]
        cmd += ["--threads", str(setting.concurrency or 8)]
        cmd += ["--queues", *self.queues[: 2 if setting.other_queue else 1]]
        return [cmd + list(setting.extra)]

    def worker_env(self, setting: Setting) -> dict[str, str]:
        env = {
            "BENCH_DRAMATIQ_BROKER": self.broker,
            "BENCH_DRAMATIQ_NAMESPACE": self.namespace,
            "BENCH_DRAMATIQ_QUEUE": self.queue,
        }
        if setting.prefetch is not None:
            env["dramatiq_queue_prefetch"] = str(setting.prefetch)
        return env

    def verify(self, conn: psycopg.Connection[Any], expected: int, setting: Setting) -> list[str]:
        problems: list[str] = []
        check(problems, "messages left (queued, unacknowledged, dead)", self.depth(), (0, 0, 0))
        self.forget()  # every run has a namespace of its own: none is left behind in Redis
        return problems


@dataclass
class DramatiqRabbit(DramatiqRedis):
    """Dramatiq's worker on its RabbitMQ broker (``$BENCH_DRAMATIQ_AMQP``, default guest on
    localhost); its queues (each with Dramatiq's delay and dead-letter queues) are named after
    the bench's database, deleted before and after every run, and declared by Dramatiq itself
    (durable queues, persistent messages)."""

    name: ClassVar[str] = "dramatiq-rabbitmq"
    packages: ClassVar[tuple[str, ...]] = ("dramatiq", "pika")
    broker_env: ClassVar[str] = "BENCH_DRAMATIQ_AMQP"
    default_broker: ClassVar[str] = "amqp://guest:guest@127.0.0.1:5672/%2F"

    def _every_queue(self) -> list[str]:
        return [q + suffix for q in self.queues for suffix in ("", ".DQ", ".XQ")]

    def _connection(self) -> Any:
        import pika

        params = pika.URLParameters(self.broker)
        params.socket_timeout = params.blocked_connection_timeout = 5
        return pika.BlockingConnection(params)

    def install(self, db: BenchDatabase | None) -> None:
        # RabbitMQ has one namespace per virtual host: the queues carry the database's name.
        self.queue = f"bench-{db.name}" if db else "bench-probe"
        self.forget()

    def forget(self) -> None:
        connection = self._connection()
        try:
            channel = connection.channel()
            for queue in self._every_queue():
                channel.queue_delete(queue)
        finally:
            connection.close()

    def depth(self) -> tuple[int, int, int]:
        """(messages ready in the queues and their delay queues, 0, dead-lettered): RabbitMQ
        does not say how many are unacknowledged without its management API; a stopped
        worker's unacknowledged ones return to ready."""
        import pika.exceptions

        ready = dead = 0
        connection = self._connection()
        try:
            for queue in self._every_queue():
                channel = connection.channel()  # a passive declare of a missing queue closes it
                try:
                    n = channel.queue_declare(queue, passive=True).method.message_count
                except pika.exceptions.ChannelClosedByBroker as exc:
                    if exc.reply_code != 404:  # not declared (yet): nothing in it
                        raise
                    continue
                channel.close()
                if queue.endswith(".XQ"):
                    dead += n
                else:
                    ready += n
        finally:
            connection.close()
        return ready, 0, dead

    def unfinished(self, started: int, expected: int) -> bool:
        return started < expected or self.depth()[0] != 0

    def inflight(self) -> int:
        return 0  # not measured (see depth)

    def make_broker(self) -> Any:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=self.broker)
