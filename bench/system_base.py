"""What every system under test provides the workloads (bench/systems.py lists them): a worker
setting, a producer, and the :class:`System` interface; :class:`Brokered`, the shared part of the
peers whose jobs live in a broker outside PostgreSQL (Celery, Dramatiq)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from .db import BenchDatabase

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


def check(problems: list[str], what: str, got: object, want: object) -> None:
    if got != want:
        problems.append(f"{what}: {got} (expected {want})")


@dataclass
class Brokered(System):
    """A peer whose jobs live in a broker outside PostgreSQL (Celery, Dramatiq): no table, no
    SQL probes; its progress comes from the handlers' records and the broker's counts.  It runs
    only where its packages are installed and its broker answers (:meth:`available`)."""

    table: ClassVar[str] = ""
    unfinished_sql: ClassVar[str] = ""
    inflight_sql: ClassVar[str] = ""
    packages: ClassVar[tuple[str, ...]] = ()  # the modules its producer and worker import
    broker_env: ClassVar[str] = ""  # the variable that names its broker
    default_broker: ClassVar[str] = ""

    @property
    def broker(self) -> str:
        return os.environ.get(self.broker_env, self.default_broker)

    def available(self) -> str | None:
        for module in self.packages:
            try:
                importlib.import_module(module)
            except ImportError:
                return f"{module} is not installed (pip install -r bench/requirements.txt)"
        try:  # a probe queue of its own, created and removed
            self.install(None)
            self.forget()
        except Exception as exc:
            return f"{self.broker} is not reachable ({type(exc).__name__}: {exc})"
        return None

    def install(self, db: BenchDatabase | None) -> None:
        """Empty queues named after ``db`` (None: the availability probe's)."""
        raise NotImplementedError

    def forget(self) -> None:
        """Remove this run's queues and keys from the broker."""
        raise NotImplementedError
