"""``skiplock worker --max-jobs / --max-memory`` as real processes: each worker process is
replaced by a fresh one after its share, every job runs exactly once, SIGTERM still stops all."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.polling import wait_for
from skiplock import App

pytestmark = pytest.mark.slow

MODULE = '''
import os
import time
from pathlib import Path

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])
RUNS = Path(os.environ["RUNS"])
HOARD = []


def ran(n: int) -> None:
    with RUNS.open("a") as f:
        f.write(f"{n} {os.getpid()}\\n")


@app.task(name="count")
def count(n: int) -> None:
    ran(n)


@app.task(name="hoard")
def hoard(n: int) -> None:
    """Leaks 16 MiB per job, as a cache that only grows would."""
    block = bytearray(16 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1  # touched, so it is resident
    HOARD.append(block)
    time.sleep(0.1)
    ran(n)
'''


def stubs(app: App) -> None:
    @app.task(name="count")
    def count(n: int) -> None: ...

    @app.task(name="hoard")
    def hoard(n: int) -> None: ...


def runs(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [
        (int(n), int(pid))
        for n, pid in (line.split() for line in path.read_text().split("\n") if line)
    ]


def run_worker(tmp_path: Path, app: App, *args: str) -> subprocess.Popen[bytes]:
    (tmp_path / "recyclemod.py").write_text(textwrap.dedent(MODULE))
    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema, "RUNS": str(tmp_path / "runs")}
    env.pop("SKIPLOCK_DATABASE_URL", None)
    command = [sys.executable, "-m", "skiplock", "worker", "recyclemod:app", "--dsn", app.dsn]
    with (tmp_path / "stderr").open("wb") as err:
        return subprocess.Popen([*command, *args], cwd=tmp_path, env=env, stderr=err)


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_until(
    tmp_path: Path, app: App, jobs: int, timeout: float, *args: str
) -> tuple[int, str, list[tuple[int, int]]]:
    """Run the worker until ``jobs`` jobs have run (and half a second more, so that a job run
    twice shows up), then SIGTERM it: its exit status, its stderr and the runs."""
    proc = run_worker(tmp_path, app, *args)
    try:
        wait_for(lambda: len(runs(tmp_path / "runs")) >= jobs, timeout, f"{jobs} jobs to run")
        time.sleep(0.5)
        code = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    return code, (tmp_path / "stderr").read_text(), runs(tmp_path / "runs")


def test_max_jobs_replaces_each_process_after_its_share(tmp_path: Path, app: App, db: Any) -> None:
    stubs(app)
    app.enqueue_many("count", [{"n": n} for n in range(200)])
    args = ("--max-jobs", "40", "--concurrency", "4", "--processes", "2")
    code, log, done = run_until(tmp_path, app, 200, 60, *args)
    assert code == 0, log
    assert sorted(n for n, _ in done) == list(range(200)), "a job ran twice or not at all"
    per_process = collections.Counter(pid for _, pid in done)
    assert len(per_process) >= 5 and max(per_process.values()) <= 40, per_process
    assert "recycled; starting a fresh one" in log and "claimed its 40 jobs" in log
    assert "exited with status" not in log, "a recycle was taken for a death"
    rows = db.execute(
        f'SELECT status, count(*), max(attempts) FROM "{app.schema}".jobs GROUP BY status'
    ).fetchall()
    assert rows == [("done", 200, 1)]


def test_max_memory_replaces_a_process_that_leaks(tmp_path: Path, app: App, db: Any) -> None:
    stubs(app)
    app.enqueue_many("hoard", [{"n": n} for n in range(40)])
    # One process, no --processes: the worker still runs under a supervisor, which replaces it.
    args = ("--max-memory", "200", "--concurrency", "1", "--prefetch", "0")
    code, log, done = run_until(tmp_path, app, 40, 90, *args)
    assert code == 0, log
    assert sorted(n for n, _ in done) == list(range(40))
    per_process = collections.Counter(pid for _, pid in done)
    # 40 jobs x 16 MiB = 640 MiB in one process without the limit; with it, several processes.
    assert len(per_process) >= 3, (per_process, log)
    assert "(--max-memory)" in log and "recycled; starting a fresh one" in log


def test_a_limit_below_a_fresh_process_is_an_error_not_a_restart_loop(
    tmp_path: Path, app: App
) -> None:
    stubs(app)
    proc = run_worker(tmp_path, app, "--max-memory", "1")  # 1 MiB: no process fits
    try:
        time.sleep(5)
        stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "stderr").read_text()
    assert "before claiming any job: raise --max-memory" in log, log
    # A death the supervisor backs off from (1 s, 2 s, 4 s ...), not a recycle replaced at once.
    assert re.search(r"exited with status 1; restarting in [1-9]\.\ds", log), log
    assert "recycled; starting a fresh one" not in log
