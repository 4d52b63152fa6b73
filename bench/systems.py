"""The queues under test, each driven only through its own public API and its own worker CLI.

For every system: how to install its schema into a fresh database, a producer (single and
bulk enqueue through the library's API), the command lines of its worker processes for one
setting, cheap probes the monitor runs while a workload is in flight (anything unfinished?
how many claimed?), and how to check in its own tables that every job ran exactly once.
The interface is in bench/system_base.py; the broker peers in bench/celery_peer.py and
bench/dramatiq_peer.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import psycopg
from psycopg.types.json import Jsonb

from .celery_peer import CeleryRabbit, CeleryRedis
from .db import BenchDatabase
from .dramatiq_peer import DramatiqRabbit, DramatiqRedis
from .seed import TABLE
from .system_base import PY, REPO, Producer, Setting, System, check, subprocess_env

__all__ = [
    "PY",
    "REPO",
    "SYSTEMS",
    "CeleryRabbit",
    "CeleryRedis",
    "DramatiqRabbit",
    "DramatiqRedis",
    "Producer",
    "Setting",
    "System",
    "subprocess_env",
    "versions",
]

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
            check(problems, "rows left in skiplock.jobs", sum(rows.values()), 0)
            return problems
        if setting.completion == "archive":
            check(problems, "rows left in skiplock.jobs", sum(rows.values()), 0)
            archived = conn.execute(
                "SELECT status, count(*) FROM skiplock.jobs_archive GROUP BY status"
            ).fetchall()
            check(problems, "skiplock.jobs_archive by status", dict(archived),
                  {"done": expected} if expected else {})  # fmt: skip
            return problems
        check(problems, "skiplock.jobs by status", rows, {"done": expected} if expected else {})
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE attempts <> 1), max(attempts) FROM skiplock.jobs"
        ).fetchone()
        assert row is not None
        check(problems, "jobs claimed other than exactly once", row[0], 0)
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
        check(problems, "rows left in pgqueuer", left[0] if left else None, 0)
        logs = dict(
            conn.execute(
                "SELECT status::text, count(*) FROM pgqueuer_log"
                " WHERE status <> 'queued' GROUP BY status"
            ).fetchall()
        )
        want = {"picked": expected, "successful": expected} if expected else {}
        check(problems, "pgqueuer_log by status", logs, want)
        row = conn.execute(
            "SELECT count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'"
        ).fetchone()
        check(problems, "distinct jobs successful", row[0] if row else None, expected)
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
        check(
            problems,
            "procrastinate_jobs by status",
            rows,
            {"succeeded": expected} if expected else {},
        )
        row = conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE attempts <> 1").fetchone()
        check(problems, "jobs attempted other than exactly once", row[0] if row else None, 0)
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
        check(problems, "ceiling_jobs by status", rows, {"done": expected} if expected else {})
        row = conn.execute("SELECT count(*) FROM ceiling_jobs WHERE attempts <> 1").fetchone()
        check(problems, "jobs attempted other than exactly once", row[0] if row else None, 0)
        return problems


QUEUES: tuple[System, ...] = (Skiplock(), PgQueuer(), Procrastinate())
CELERY: tuple[System, ...] = (CeleryRedis(), CeleryRabbit())
DRAMATIQ: tuple[System, ...] = (DramatiqRedis(), DramatiqRabbit())
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
        "pika",
        "psycopg",
        "asyncpg",
        "matplotlib",
    ):
        try:
            out[dist] = version(dist)
        except Exception:
            out[dist] = "not installed"
    return out
