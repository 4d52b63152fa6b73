"""Worker processes and the monitor that samples them, the server's backends and the WAL.

:class:`Workers` starts a setting's worker command lines as subprocesses (output to a log
file), stops them with SIGTERM (their graceful shutdown, so each writes what its handler
recorded), and lists their process trees.  :class:`Monitor` samples, every few tens of
milliseconds: the CPU seconds of those processes and of the database's backends, the WAL
position, and one probe query of the system under test (e.g. "is anything unfinished?").
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from .apps.record import load, started_so_far
from .db import BenchDatabase, backend_pids, connect, descendants, proc_cpu_seconds
from .systems import REPO, Setting, System, subprocess_env


class Workers:
    def __init__(
        self,
        system: System,
        setting: Setting,
        db: BenchDatabase,
        log_dir: Path,
        prefix: Sequence[str] = (),
    ):
        self.prefix = list(prefix)  # e.g. ``ip netns exec NS``: run them on another "host"
        self.system = system
        self.setting = setting
        self.db = db
        self.record_dir = Path(tempfile.mkdtemp(prefix="bench-rec-"))
        self.log_path = log_dir / f"{setting.key.replace('/', '-')}.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        env = subprocess_env(
            self.db,
            {
                "BENCH_RECORD_DIR": str(self.record_dir),
                "BENCH_WORK": self.setting.work,
                "BENCH_OTHER_QUEUE": "1" if self.setting.other_queue else "",
                **self.system.worker_env(self.setting),
            },
        )
        log = self.log_path.open("ab")
        for cmd in self.system.worker_commands(self.db, self.setting):
            self.procs.append(
                subprocess.Popen(
                    [*self.prefix, *cmd],
                    env=env,
                    cwd=REPO,
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                )
            )
        log.close()

    def pids(self) -> list[int]:
        out: list[int] = []
        for p in self.procs:
            if p.poll() is None:
                out.extend(descendants(p.pid))
        return out

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self, timeout: float = 60.0) -> list[int | None]:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return [p.returncode for p in self.procs]

    def exits(self) -> list[tuple[int, int | None]]:
        """(pid, exit code) of each started command."""
        return [(p.pid, p.returncode) for p in self.procs]

    def ran_jobs(self, pid: int) -> bool:
        """Did the process ``pid`` itself start a job? (Its count page exists from its first
        record.)"""
        return (self.record_dir / f"{pid}.count").exists()

    def records(self) -> tuple[list[int], list[float]]:
        return load(self.record_dir)

    def started_so_far(self) -> int:
        """Jobs the handlers have started so far (live, from the processes' count pages)."""
        return started_so_far(self.record_dir)

    def cleanup(self) -> None:
        shutil.rmtree(self.record_dir, ignore_errors=True)

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class Sample:
    t: float  # time.time()
    worker_cpu: float  # seconds, cumulative over every worker process seen
    pg_cpu: float  # seconds, cumulative over every backend of the bench database seen
    wal: int  # bytes
    probe: Any


class CpuTracker:
    """Cumulative CPU of a changing set of processes: the last value seen per pid is kept."""

    def __init__(self) -> None:
        self.last: dict[int, float] = {}

    def update(self, pids: list[int] | set[int]) -> float:
        for pid in pids:
            cpu = proc_cpu_seconds(pid)
            if cpu is not None:
                self.last[pid] = cpu
        return sum(self.last.values())


class Monitor:
    def __init__(
        self,
        db: BenchDatabase,
        worker_pids: Callable[[], list[int]],
        probe_sql: str | None = None,
        params: dict[str, Any] | None = None,
        refresh_every: float = 0.5,
    ) -> None:
        self.refresh_every = refresh_every
        self.db = db
        self.conn = connect(db.dsn)
        self.worker_pids = worker_pids
        self.probe_sql = probe_sql
        self.params = params or {}
        self.samples: list[Sample] = []
        self.workers = CpuTracker()
        self.backends = CpuTracker()
        self._backend_pids: set[int] = set()
        self._refreshed = 0.0
        self.queries = 0  # transactions this monitor ran (subtracted from the workload's)

    def execute(self, query: str, params: dict[str, Any] | tuple[Any, ...] | None = None) -> Any:
        self.queries += 1
        return self.conn.execute(query, params).fetchone()

    def refresh_backends(self) -> None:
        self.queries += 1
        self._backend_pids |= backend_pids(self.conn, self.db.name)
        self._refreshed = time.monotonic()

    def sample(self) -> Sample:
        if time.monotonic() - self._refreshed >= self.refresh_every:
            self.refresh_backends()
        probe = f", ({self.probe_sql})" if self.probe_sql else ""
        row = self.execute(f"SELECT pg_current_wal_lsn() - '0/0'::pg_lsn{probe}", self.params)
        s = Sample(
            t=time.time(),
            worker_cpu=self.workers.update(self.worker_pids()),
            pg_cpu=self.backends.update(self._backend_pids),
            wal=int(row[0]),
            probe=row[1] if self.probe_sql else None,
        )
        self.samples.append(s)
        return s

    def finish(self) -> Sample:
        """A last sample, after looking for backends again: one that connected since the last
        look (a drain shorter than ``refresh_every`` may end before the workers' backends were
        ever seen) counts with all its CPU so far."""
        self.refresh_backends()
        return self.sample()

    def at(self, t: float) -> Sample:
        """The last sample taken at or before ``t`` (the first one if none was)."""
        best = self.samples[0]
        for s in self.samples:
            if s.t <= t:
                best = s
            else:
                break
        return best

    def close(self) -> None:
        self.conn.close()


def wait_for_backends(conn: psycopg.Connection[Any], dbname: str, n: int, timeout: float) -> bool:
    """Until ``n`` backends are connected to the database (workers ready), or timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(backend_pids(conn, dbname)) >= n:
            return True
        time.sleep(0.05)
    return False
