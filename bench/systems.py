"""The queues under test, each driven only through its own public API and its own worker CLI.

For every system: how to install its schema into a fresh database, a producer (single and
bulk enqueue through the library's API), the command lines of its worker processes for one
setting, cheap probes the monitor runs while a workload is in flight (anything unfinished?
how many claimed?), and how to check in its own tables that every job ran exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from psycopg.types.json import Jsonb

from .db import BenchDatabase
from .seed import TABLE

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


def subprocess_env(db: BenchDatabase, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["BENCH_DSN"] = db.url
    env["PGDSN"] = db.url
    env.pop("SKIPLOCK_DATABASE_URL", None)
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Setting:
    """One configuration of one system's worker, e.g. PGQueuer with batch 100 in 2 processes."""

    system: str
    label: str
    processes: int = 1
    concurrency: int | None = None  # skiplock, Procrastinate; PGQueuer --max-concurrent-tasks
    batch: int | None = None  # PGQueuer --batch-size
    completion: str = "keep"  # skiplock App(completion=...)
    handler: str = "async"  # skiplock: the no-op task as an ``async def`` or a plain ``def``
    log_level: str | None = None
    extra: tuple[str, ...] = ()
    notes: str = ""
    work: str = ""  # the handler's work, "<kind>:<seconds>" (bench/apps/work.py); "" = no-op
    pool: str = ""  # Celery --pool (prefork: concurrency = processes)
    prefetch: int | None = None  # Celery --prefetch-multiplier
    acks_late: bool = False  # Celery task_acks_late
    other_queue: bool = False  # the under-load workload: the worker serves a second queue too

    @property
    def key(self) -> str:
        return f"{self.system}/{self.label}"


class Producer:
    """Enqueues jobs numbered ``n`` through one system's public API (async)."""

    async def one(self, n: int) -> None:
        raise NotImplementedError

    async def many(self, numbers: Sequence[int]) -> None:
        raise NotImplementedError

    async def urgent(self, n: int) -> None:
        """Job ``n`` on the same queue as :meth:`one`'s, at a higher priority (the under-load
        workload); NotImplementedError where the system has no such priority."""
        raise NotImplementedError

    async def other(self, n: int) -> None:
        """Job ``n`` on a second queue (the under-load workload)."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


@dataclass
class System:
    name: ClassVar[str]
    table: ClassVar[str]  # the hot table (dead tuples are read from it)
    unfinished_sql: ClassVar[str]  # returns 1 row: is anything left unfinished?
    inflight_sql: ClassVar[str]  # returns 1 row: how many jobs are claimed and not recorded
    versions: dict[str, str] = field(default_factory=dict)

    def install(self, db: BenchDatabase) -> None:
        raise NotImplementedError

    async def producer(self, db: BenchDatabase) -> Producer:
        raise NotImplementedError

    def worker_commands(self, db: BenchDatabase, setting: Setting) -> list[list[str]]:
        raise NotImplementedError

    def worker_env(self, setting: Setting) -> dict[str, str]:
        return {}

    def verify(self, conn: psycopg.Connection[Any], expected: int, setting: Setting) -> list[str]:
        """Problems found in the system's own tables after ``expected`` jobs should have run."""
        raise NotImplementedError

    def unfinished(self, started: int, expected: int) -> bool:
        """For a system without tables in PostgreSQL (``unfinished_sql`` empty): is anything
        left, given how many jobs the handlers have started?"""
        raise NotImplementedError

    def inflight(self) -> int:
        """Jobs claimed and not yet acknowledged (systems without ``inflight_sql``)."""
        raise NotImplementedError

    def ready(self, record_dir: Path, setting: Setting) -> bool:
        """Are the started workers consuming? (Systems that say so: Celery.)"""
        return True

    def available(self) -> str | None:
        """Why this system cannot run here (its broker is not reachable), or None."""
        return None


def _check(problems: list[str], what: str, got: object, want: object) -> None:
    if got != want:
        problems.append(f"{what}: {got} (expected {want})")


# -- skiplock -------------------------------------------------------------------------------


class _SkiplockProducer(Producer):
    def __init__(self, dsn: str) -> None:
        from skiplock import App

        self.app = App(dsn, "skiplock")

        @self.app.task(name="noop", queue="bench")
        async def noop(n: int) -> None:  # the producer never runs it
            return None

        @self.app.task(name="other", queue="other")
        async def other(n: int) -> None:
            return None

        self.task = noop
        self.urgent_call = noop.with_options(priority=-1)  # lower runs first
        self.other_task = other

    async def one(self, n: int) -> None:
        await self.task.enqueue_async(n=n)

    async def urgent(self, n: int) -> None:
        await self.urgent_call.enqueue_async(n=n)

    async def other(self, n: int) -> None:
        await self.other_task.enqueue_async(n=n)

    async def many(self, numbers: Sequence[int]) -> None:
        await self.app.enqueue_many_async("noop", [{"n": n} for n in numbers])

    async def close(self) -> None:
        await self.app.close_async()
        self.app.close()


@dataclass
class Skiplock(System):
    name: ClassVar[str] = "skiplock"
    table: ClassVar[str] = "skiplock.jobs"
    unfinished_sql: ClassVar[str] = (
        "SELECT EXISTS (SELECT 1 FROM skiplock.jobs WHERE status = 'pending')"
        " OR EXISTS (SELECT 1 FROM skiplock.jobs WHERE status = 'running')"
    )
    inflight_sql: ClassVar[str] = "SELECT count(*) FROM skiplock.jobs WHERE status = 'running'"

    def install(self, db: BenchDatabase) -> None:
        from skiplock import App

        app = App(db.dsn, "skiplock")
        try:
            app.migrate()
        finally:
            app.close()

    async def producer(self, db: BenchDatabase) -> Producer:
        return _SkiplockProducer(db.dsn)

    def worker_commands(self, db: BenchDatabase, setting: Setting) -> list[list[str]]:
        cmd = [PY, "-m", "skiplock", "worker", "bench.apps.skiplock_app:app", "--dsn", db.dsn]
        if setting.concurrency is not None:
            cmd += ["--concurrency", str(setting.concurrency)]
        if setting.processes > 1:
            cmd += ["--processes", str(setting.processes)]  # its own supervisor
        if setting.log_level:
            cmd += ["--log-level", setting.log_level]
        return [cmd + list(setting.extra)]

    def worker_env(self, setting: Setting) -> dict[str, str]:
        return {"BENCH_COMPLETION": setting.completion, "BENCH_HANDLER": setting.handler}

    def verify(self, conn: psycopg.Connection[Any], expected: int, setting: Setting) -> list[str]:
        problems: list[str] = []
        rows = dict(
            conn.execute("SELECT status, count(*) FROM skiplock.jobs GROUP BY status").fetchall()
        )
        if setting.completion == "delete":
            _check(problems, "rows left in skiplock.jobs", sum(rows.values()), 0)
            return problems
        if setting.completion == "archive":
            _check(problems, "rows left in skiplock.jobs", sum(rows.values()), 0)
            archived = conn.execute(
                "SELECT status, count(*) FROM skiplock.jobs_archive GROUP BY status"
            ).fetchall()
            _check(problems, "skiplock.jobs_archive by status", dict(archived),
                   {"done": expected} if expected else {})  # fmt: skip
            return problems
        _check(problems, "skiplock.jobs by status", rows, {"done": expected} if expected else {})
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE attempts <> 1), max(attempts) FROM skiplock.jobs"
        ).fetchone()
        assert row is not None
        _check(problems, "jobs claimed other than exactly once", row[0], 0)
        return problems


# -- PGQueuer -------------------------------------------------------------------------------


class _PgqProducer(Producer):
    def __init__(self, connection: Any, queries: Any) -> None:
        self.connection = connection
        self.queries = queries

    async def one(self, n: int) -> None:
        await self.queries.enqueue("noop", str(n).encode(), 0)

    async def urgent(self, n: int) -> None:
        await self.queries.enqueue("noop", str(n).encode(), 10)  # higher runs first

    async def other(self, n: int) -> None:  # PGQueuer's queues are its entrypoints
        await self.queries.enqueue("other", str(n).encode(), 0)

    async def many(self, numbers: Sequence[int]) -> None:
        k = len(numbers)
        await self.queries.enqueue(["noop"] * k, [str(n).encode() for n in numbers], [0] * k)

    async def close(self) -> None:
        await self.connection.close()


@dataclass
class PgQueuer(System):
    name: ClassVar[str] = "pgqueuer"
    table: ClassVar[str] = "public.pgqueuer"
    unfinished_sql: ClassVar[str] = (
        "SELECT EXISTS (SELECT 1 FROM pgqueuer WHERE status = 'queued')"
        " OR EXISTS (SELECT 1 FROM pgqueuer WHERE status = 'picked')"
    )
    inflight_sql: ClassVar[str] = "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"

    def install(self, db: BenchDatabase) -> None:
        env = subprocess_env(db)
        for args in (["install"], ["autovac"]):  # its documented checklist: install, autovac
            subprocess.run(
                [PY, "-m", "pgqueuer", *args], env=env, check=True, capture_output=True, cwd=REPO
            )

    async def producer(self, db: BenchDatabase) -> Producer:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        connection = await asyncpg.connect(db.url)
        return _PgqProducer(connection, Queries(AsyncpgDriver(connection)))

    def worker_commands(self, db: BenchDatabase, setting: Setting) -> list[list[str]]:
        # `pgq run` as a script (see bench/apps/pgqueuer_worker.py for why not the CLI itself).
        cmd = [PY, "-m", "bench.apps.pgqueuer_worker", "bench.apps.pgqueuer_app:factory"]
        if setting.batch is not None:
            cmd += ["--batch-size", str(setting.batch)]
        if setting.concurrency is not None:
            cmd += ["--max-concurrent-tasks", str(setting.concurrency)]
        cmd += list(setting.extra)
        return [cmd for _ in range(setting.processes)]

    def verify(self, conn: psycopg.Connection[Any], expected: int, setting: Setting) -> list[str]:
        problems: list[str] = []
        left = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()
        _check(problems, "rows left in pgqueuer", left[0] if left else None, 0)
        logs = dict(
            conn.execute(
                "SELECT status::text, count(*) FROM pgqueuer_log"
                " WHERE status <> 'queued' GROUP BY status"
            ).fetchall()
        )
        want = {"picked": expected, "successful": expected} if expected else {}
        _check(problems, "pgqueuer_log by status", logs, want)
        row = conn.execute(
            "SELECT count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'"
        ).fetchone()
        _check(problems, "distinct jobs successful", row[0] if row else None, expected)
        return problems


# -- Procrastinate --------------------------------------------------------------------------


class _ProcrastinateProducer(Producer):
    def __init__(self, app: Any, task: Any) -> None:
        self.app = app
        self.task = task

    async def one(self, n: int) -> None:
        await self.task.defer_async(n=n)

    async def urgent(self, n: int) -> None:
        await self.task.configure(priority=10).defer_async(n=n)  # higher runs first

    async def other(self, n: int) -> None:
        await self.task.configure(queue="other").defer_async(n=n)

    async def many(self, numbers: Sequence[int]) -> None:
        await self.task.batch_defer_async(*({"n": n} for n in numbers))

    async def close(self) -> None:
        await self.app.connector.close_async()


@dataclass
class Procrastinate(System):
    name: ClassVar[str] = "procrastinate"
    table: ClassVar[str] = "public.procrastinate_jobs"
    unfinished_sql: ClassVar[str] = (
        "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status = 'todo')"
        " OR EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status = 'doing')"
    )
    inflight_sql: ClassVar[str] = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
    app_path: ClassVar[str] = "bench.apps.procrastinate_app.app"

    def install(self, db: BenchDatabase) -> None:
        subprocess.run(
            [PY, "-m", "procrastinate", "--app", self.app_path, "schema", "--apply"],
            env=subprocess_env(db),
            check=True,
            capture_output=True,
            cwd=REPO,
        )

    async def producer(self, db: BenchDatabase) -> Producer:
        from procrastinate import App, PsycopgConnector

        app = App(connector=PsycopgConnector(conninfo=db.dsn))

        @app.task(name="noop", queue="bench")
        async def noop(n: int) -> None:  # the producer never runs it
            return None

        await app.open_async()
        return _ProcrastinateProducer(app, noop)

    def worker_commands(self, db: BenchDatabase, setting: Setting) -> list[list[str]]:
        cmd = [PY, "-m", "procrastinate", "--app", self.app_path]
        if setting.log_level:
            cmd += ["--log-level", setting.log_level.lower()]
        cmd += ["worker"]
        if setting.concurrency is not None:
            cmd += ["--concurrency", str(setting.concurrency)]
        cmd += list(setting.extra)
        return [cmd for _ in range(setting.processes)]

    def verify(self, conn: psycopg.Connection[Any], expected: int, setting: Setting) -> list[str]:
        problems: list[str] = []
        rows = dict(
            conn.execute(
                "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status"
            ).fetchall()
        )
        _check(
            problems,
            "procrastinate_jobs by status",
            rows,
            {"succeeded": expected} if expected else {},
        )
        row = conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE attempts <> 1").fetchone()
        _check(problems, "jobs attempted other than exactly once", row[0] if row else None, 0)
        return problems


# -- the latency floor ----------------------------------------------------------------------


class _SqlFloorProducer(Producer):
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def one(self, n: int) -> None:
        await self.conn.execute(SQL_FLOOR_ENQUEUE, {"payload": Jsonb({"n": n})}, prepare=True)

    async def many(self, numbers: Sequence[int]) -> None:
        raise NotImplementedError("the floor runs the latency workload only")

    async def close(self) -> None:
        await self.conn.close()


# The seed's enqueue: insert the row and NOTIFY in the same transaction (one statement).
SQL_FLOOR_ENQUEUE = (
    "WITH j AS (INSERT INTO ceiling_jobs (payload) VALUES (%(payload)s) RETURNING id)"
    " SELECT pg_notify('sql_floor', '') FROM j"
)


@dataclass
class SqlFloor(System):
    """The latency floor: the seed's enqueue, LISTEN and claim in raw SQL on psycopg, no
    library (bench/apps/sql_floor_worker.py).  Not a peer: what every queue built this way pays."""

    name: ClassVar[str] = "sql-floor"
    table: ClassVar[str] = "public.ceiling_jobs"
    unfinished_sql: ClassVar[str] = (
        "SELECT EXISTS (SELECT 1 FROM ceiling_jobs WHERE status IN ('pending', 'running'))"
    )
    inflight_sql: ClassVar[str] = "SELECT count(*) FROM ceiling_jobs WHERE status = 'running'"

    def install(self, db: BenchDatabase) -> None:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute(TABLE)

    async def producer(self, db: BenchDatabase) -> Producer:
        return _SqlFloorProducer(await psycopg.AsyncConnection.connect(db.dsn, autocommit=True))

    def worker_commands(self, db: BenchDatabase, setting: Setting) -> list[list[str]]:
        return [[PY, "-m", "bench.apps.sql_floor_worker"] for _ in range(setting.processes)]

    def verify(self, conn: psycopg.Connection[Any], expected: int, setting: Setting) -> list[str]:
        problems: list[str] = []
        rows = dict(conn.execute("SELECT status, count(*) FROM ceiling_jobs GROUP BY 1").fetchall())
        _check(problems, "ceiling_jobs by status", rows, {"done": expected} if expected else {})
        row = conn.execute("SELECT count(*) FROM ceiling_jobs WHERE attempts <> 1").fetchone()
        _check(problems, "jobs attempted other than exactly once", row[0] if row else None, 0)
        return problems


# -- Celery ---------------------------------------------------------------------------------


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
class CeleryRedis(System):
    """Celery's own worker on a Redis broker (``$BENCH_CELERY_REDIS``, default
    ``redis://127.0.0.1:6379/11``); its queue and keys are named after the bench's database
    and deleted before every run."""

    name: ClassVar[str] = "celery-redis"
    table: ClassVar[str] = ""
    unfinished_sql: ClassVar[str] = ""
    inflight_sql: ClassVar[str] = ""
    broker_env: ClassVar[str] = "BENCH_CELERY_REDIS"
    default_broker: ClassVar[str] = "redis://127.0.0.1:6379/11"

    queue: str = "bench-probe"  # set by install(): named after the bench's database

    @property
    def broker(self) -> str:
        return os.environ.get(self.broker_env, self.default_broker)

    @property
    def other_queue(self) -> str:
        return f"{self.queue}-other"

    def app(self) -> Any:
        from celery import Celery

        app = Celery("bench", broker=self.broker, set_as_current=False)
        app.conf.task_default_queue = self.queue  # as bench/apps/celery_app.py's
        app.conf.broker_transport_options = {"global_keyprefix": f"{self.queue}:"}
        return app

    def available(self) -> str | None:
        try:
            import celery  # noqa: F401
        except ImportError:
            return "celery is not installed (pip install -r bench/requirements.txt)"
        try:
            self.install(None)
            self.forget()
        except Exception as exc:
            return f"{self.broker} is not reachable ({type(exc).__name__}: {exc})"
        return None

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
        _check(problems, "messages left (queued, unacknowledged)", self.depth(), (0, 0))
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


# -- Dramatiq --------------------------------------------------------------------------------


class _DramatiqProducer(Producer):
    """Dramatiq has no async API and no bulk send: ``send`` per job (one Lua script call)."""

    def __init__(self, broker: Any) -> None:
        import dramatiq

        def noop(n: int) -> None:  # the producer never runs it
            return None

        self.broker = broker
        self.task = dramatiq.actor(noop, actor_name="noop", queue_name="bench", broker=broker)
        self.other_task = dramatiq.actor(
            noop, actor_name="other", queue_name="other", broker=broker
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
class DramatiqRedis(System):
    """Dramatiq's own worker (``dramatiq bench.apps.dramatiq_app``) on its Redis broker
    (``$BENCH_DRAMATIQ_REDIS``, default ``redis://127.0.0.1:6379/12``); its keys are in a
    namespace named after the bench's database, deleted before and after every run."""

    name: ClassVar[str] = "dramatiq-redis"
    table: ClassVar[str] = ""
    unfinished_sql: ClassVar[str] = ""
    inflight_sql: ClassVar[str] = ""
    queues: ClassVar[tuple[str, ...]] = ("bench", "other")

    namespace: str = "bench-probe"  # set by install(): named after the bench's database

    @property
    def broker(self) -> str:
        return os.environ.get("BENCH_DRAMATIQ_REDIS", "redis://127.0.0.1:6379/12")

    def available(self) -> str | None:
        try:
            import dramatiq  # noqa: F401
        except ImportError:
            return "dramatiq is not installed (pip install -r bench/requirements.txt)"
        try:
            self.install(None)
            self.forget()
        except Exception as exc:
            return f"{self.broker} is not reachable ({type(exc).__name__}: {exc})"
        return None

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

    async def producer(self, db: BenchDatabase) -> Producer:
        from dramatiq.brokers.redis import RedisBroker

        return _DramatiqProducer(RedisBroker(url=self.broker, namespace=self.namespace))

    def worker_commands(self, db: BenchDatabase, setting: Setting) -> list[list[str]]:
        cmd = [PY, "-m", "dramatiq", "bench.apps.dramatiq_app"]
        cmd += ["--processes", str(setting.processes)]
        cmd += ["--threads", str(setting.concurrency or 8)]
        cmd += ["--queues", "bench", *(["other"] if setting.other_queue else [])]
        return [cmd + list(setting.extra)]

    def worker_env(self, setting: Setting) -> dict[str, str]:
        env = {"BENCH_DRAMATIQ_BROKER": self.broker, "BENCH_DRAMATIQ_NAMESPACE": self.namespace}
        if setting.prefetch is not None:
            env["dramatiq_queue_prefetch"] = str(setting.prefetch)
        return env

    def verify(self, conn: psycopg.Connection[Any], expected: int, setting: Setting) -> list[str]:
        problems: list[str] = []
        _check(problems, "messages left (queued, unacknowledged, dead)", self.depth(), (0, 0, 0))
        self.forget()  # every run has a namespace of its own: none is left behind in Redis
        return problems


QUEUES: tuple[System, ...] = (Skiplock(), PgQueuer(), Procrastinate())
CELERY: tuple[System, ...] = (CeleryRedis(), CeleryRabbit())
DRAMATIQ: tuple[System, ...] = (DramatiqRedis(),)
SYSTEMS: dict[str, System] = {s.name: s for s in (*QUEUES, *CELERY, *DRAMATIQ, SqlFloor())}


def versions() -> dict[str, str]:
    from importlib.metadata import version

    out = {}
    for dist in (
        "skiplock",
        "pgqueuer",
        "procrastinate",
        "celery",
        "dramatiq",
        "redis",
        "psycopg",
        "asyncpg",
        "matplotlib",
    ):
        try:
            out[dist] = version(dist)
        except Exception:
            out[dist] = "not installed"
    return out
