"""The CLI as real processes: burst runs, kill -9 in both worker models, SIGTERM, migrate.

Each test writes a small task module into its tmp_path and runs
``python -m skiplock worker jobsmod:app`` there against the test's own schema.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.polling import wait_for
from helpers.stores import SyncStore
from skiplock import App, FixedDelay, JobStatus
from skiplock._db.migrations import all_migrations

pytestmark = pytest.mark.slow

MODULE = '''
import json
import os
import signal
import time
from pathlib import Path

from skiplock import App, FixedDelay

app = App(os.environ["DSN"], os.environ["SCHEMA"])
MARK = Path(os.environ["MARK"])


def mark() -> int:
    """Append a line to the marker file; returns how many runs came before this one."""
    before = MARK.read_text().count("\\n") if MARK.exists() else 0
    with MARK.open("a") as f:
        f.write(f"{os.getpid()}\\n")
        f.flush()
        os.fsync(f.fileno())
    return before


@app.task(name="quick")
def quick(n: int) -> None:
    pass


@app.task(name="stall")
def stall(seconds: float) -> None:
    """Sleeps on its first run only, so a crashed first run is followed by a quick one."""
    if mark() == 0:
        time.sleep(seconds)


@app.task(name="linger")
def linger(seconds: float) -> None:
    mark()
    time.sleep(seconds)


@app.task(name="suicide", model="held", max_attempts=3, retry=FixedDelay(0))
def suicide() -> None:
    """Kills its own worker process, every time."""
    mark()
    os.kill(os.getpid(), signal.SIGKILL)
'''


def register_stubs(app: App) -> None:
    """Same task names on the test's side, to enqueue them."""

    @app.task(name="quick")
    def quick(n: int) -> None: ...

    @app.task(name="stall")
    def stall(seconds: float) -> None: ...

    @app.task(name="linger")
    def linger(seconds: float) -> None: ...

    @app.task(name="suicide", model="held", max_attempts=3, retry=FixedDelay(0))
    def suicide() -> None: ...


@pytest.fixture
def workdir(tmp_path: Path, app: App) -> Path:
    (tmp_path / "jobsmod.py").write_text(textwrap.dedent(MODULE))
    register_stubs(app)
    return tmp_path


def marks(workdir: Path) -> int:
    path = workdir / "marks"
    return path.read_text().count("\n") if path.exists() else 0


class WorkerProcess:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    @property
    def stderr(self) -> str:
        return self.log.read_text()


@contextmanager
def worker_process(workdir: Path, app: App, *args: str, name: str = "w") -> Iterator[WorkerProcess]:
    """A ``skiplock worker`` process; killed and reaped on the way out whatever happens."""
    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema, "MARK": str(workdir / "marks")}
    env.pop("SKIPLOCK_DATABASE_URL", None)
    log = workdir / f"{name}.stderr"
    command = [sys.executable, "-m", "skiplock", "worker", "jobsmod:app", "--dsn", app.dsn, *args]
    with log.open("wb") as err:
        proc = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        yield WorkerProcess(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def job_state(db: Any, app: App, job_id: int) -> tuple[str, int, str | None]:
    row = db.execute(
        sql.SQL("SELECT status, attempts, locked_by FROM {} WHERE id = %s").format(
            sql.Identifier(app.schema, "jobs")
        ),
        (job_id,),
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_burst_runs_every_due_job_and_exits_0(workdir: Path, app: App, db: Any) -> None:
    ids = [e.id for e in app.enqueue_many("quick", [{"n": n} for n in range(50)])]
    with worker_process(workdir, app, "--burst", "--concurrency", "4", "--log-level", "debug") as w:
        assert w.proc.wait(timeout=60) == 0, w.stderr
    job_lines = [
        line for line in w.stderr.splitlines() if re.search(r"event=finished job_id=\d+\b", line)
    ]
    logged = sorted(int(re.findall(r"\bjob_id=(\d+)\b", line)[0]) for line in job_lines)
    assert logged == ids  # one line per job, none twice
    assert all("done" in line for line in job_lines)
    counts = app.sync_client.counts()
    assert counts == [("default", "done", 50)]


def test_held_worker_killed_mid_job_frees_the_job_at_once(
    workdir: Path, app: App, store: SyncStore, db: Any
) -> None:
    job_id = app.enqueue("stall", {"seconds": 120}).id
    s = store
    with worker_process(workdir, app, "--model", "held", "--lease", "60", name="held") as w:
        wait_for(lambda: marks(workdir) == 1 or w.proc.poll() is not None, 30, "the first run")
        assert w.proc.poll() is None, w.stderr
        # While it runs, the job is locked, not visibly running.
        assert job_state(db, app, job_id) == ("pending", 0, None)
        assert s.job_claim(db, ["default"], 1, "probe", 30) == []
        w.proc.kill()
        w.proc.wait(timeout=30)
        killed_at = time.monotonic()

    def claimable() -> bool:
        # Claim inside a transaction that is rolled back: proves claimability, changes nothing.
        with db.transaction(force_rollback=True):
            return [j.id for j in s.job_claim(db, ["default"], 1, "probe", 30)] == [job_id]

    wait_for(claimable, 10, "the dead worker's row lock to go")
    # Well before the 60 s lease would have run out: the lock died with the connection.
    assert time.monotonic() - killed_at < 10
    assert job_state(db, app, job_id) == ("pending", 0, None)  # the crashed attempt rolled back

    with worker_process(workdir, app, "--burst", name="second") as w2:
        assert w2.proc.wait(timeout=60) == 0, w2.stderr
    assert marks(workdir) == 2
    job = app.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.DONE, 1)


def test_a_held_task_that_kills_its_worker_runs_max_attempts_times_then_fails(
    workdir: Path, app: App, db: Any
) -> None:
    job_id = app.enqueue("suicide", {}).id
    codes = []
    while len(codes) < 8 and job_state(db, app, job_id)[0] != "failed":
        with worker_process(workdir, app, "--burst", name=f"w{len(codes)}") as w:
            codes.append(w.proc.wait(timeout=60))
    # Three attempts each killed their worker; the fourth worker found the third dead and,
    # with the attempts spent, failed the job without running it.
    assert codes == [-signal.SIGKILL] * 3 + [0], codes
    assert marks(workdir) == 3
    job = app.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.FAILED, 3)
    assert job.last_error is not None and job.last_error.startswith(
        "WorkerDied: the worker running attempt 3"
    )


def test_lease_worker_killed_mid_job_is_reclaimed_and_rerun(
    workdir: Path, app: App, db: Any
) -> None:
    job_id = app.enqueue("stall", {"seconds": 120}).id
    with worker_process(workdir, app, "--lease", "1", "--poll-interval", "0.2", name="a") as w:
        wait_for(lambda: marks(workdir) == 1 or w.proc.poll() is not None, 30, "the first run")
        assert w.proc.poll() is None, w.stderr
        status, attempts, first_owner = job_state(db, app, job_id)
        assert (status, attempts) == ("running", 1)
        w.proc.kill()
        w.proc.wait(timeout=30)
    # The dead worker's claim stays until its lease runs out.
    assert job_state(db, app, job_id) == ("running", 1, first_owner)

    with worker_process(workdir, app, "--lease", "1", "--poll-interval", "0.2", name="b") as w2:
        wait_for(
            lambda: job_state(db, app, job_id)[0] == "done" or w2.proc.poll() is not None,
            30,
            "the reclaimed job to run again",
        )
        w2.proc.send_signal(signal.SIGTERM)
        assert w2.proc.wait(timeout=30) == 0, w2.stderr
    status, attempts, second_owner = job_state(db, app, job_id)
    assert (status, attempts) == ("done", 2)
    assert second_owner != first_owner
    assert marks(workdir) == 2


def test_sigterm_lets_the_running_job_finish_then_exits_0(workdir: Path, app: App, db: Any) -> None:
    running_id = app.enqueue("linger", {"seconds": 1.5}).id
    waiting_id = app.enqueue("quick", {"n": 1}, priority=5).id
    with worker_process(workdir, app, "--concurrency", "1", "--poll-interval", "0.2") as w:
        wait_for(lambda: marks(workdir) == 1 or w.proc.poll() is not None, 30, "the job to start")
        assert w.proc.poll() is None, w.stderr
        w.proc.send_signal(signal.SIGTERM)
        assert w.proc.wait(timeout=30) == 0, w.stderr
    assert job_state(db, app, running_id)[:2] == ("done", 1)
    # Once told to stop, it claimed nothing new.
    assert job_state(db, app, waiting_id)[:2] == ("pending", 0)


def test_a_running_worker_runs_a_chain_of_dependent_jobs_in_order(
    workdir: Path, app: App, db: Any
) -> None:
    """Not a burst: the worker's maintenance leader (a round every poll interval) releases each
    waiting job once the one before it is done, and wakes the workers."""
    first = app.enqueue("linger", {"seconds": 0.3}).id
    second = app.enqueue("quick", {"n": 2}, depends_on=[first]).id
    third = app.enqueue("quick", {"n": 3}, depends_on=[second], priority=-5).id
    broken = app.enqueue("suicide", depends_on=[third], delay=3600).id  # due in an hour
    assert job_state(db, app, third)[0] == "waiting"
    with worker_process(
        workdir, app, "--concurrency", "4", "--poll-interval", "0.2", "--log-level", "debug"
    ) as w:
        wait_for(
            lambda: job_state(db, app, third)[0] == "done" or w.proc.poll() is not None,
            30,
            "the chain to run",
        )
        assert w.proc.poll() is None, w.stderr
        # Released once its dependency is done, though not yet due: scheduled, not run.
        wait_for(lambda: job_state(db, app, broken)[0] == "scheduled", 10, "the last release")
        w.proc.send_signal(signal.SIGTERM)
        assert w.proc.wait(timeout=30) == 0, w.stderr
    finished = [
        int(re.findall(r"\bjob_id=(\d+)\b", line)[0])
        for line in w.stderr.splitlines()
        if "event=finished" in line
    ]
    assert finished == [first, second, third], w.stderr
    assert marks(workdir) == 1  # the suicide task never ran


def _run_cli(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kwargs,
    )


def _shape(db: Any, schema: str) -> dict[str, Any]:
    columns = db.execute(
        "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity "
        "FROM information_schema.columns WHERE table_schema = %s "
        "ORDER BY table_name, ordinal_position",
        (schema,),
    ).fetchall()
    indexes = db.execute(
        "SELECT tablename, indexname, replace(indexdef, %s, 'S') FROM pg_indexes "
        "WHERE schemaname = %s ORDER BY tablename, indexname",
        (schema, schema),
    ).fetchall()
    checks = db.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE connamespace = %s::regnamespace ORDER BY conname",
        (schema,),
    ).fetchall()
    options = db.execute(
        "SELECT relname, reloptions FROM pg_class "
        "WHERE relnamespace = %s::regnamespace AND relkind = 'r' ORDER BY relname",
        (schema,),
    ).fetchall()
    versions = db.execute(
        sql.SQL("SELECT version, name FROM {} ORDER BY version").format(
            sql.Identifier(schema, "migrations")
        )
    ).fetchall()
    return {
        "columns": columns,
        "indexes": indexes,
        "constraints": [(t.split(".")[-1], n, d) for t, n, d in checks],
        "options": options,
        "versions": versions,
    }


def test_migrate_command_and_printed_sql_make_the_same_schema(pg_dsn: str, db: Any) -> None:
    suffix = os.urandom(4).hex()
    applied, printed = f"cli_{suffix}", f"sql_{suffix}"
    try:
        first = _run_cli("migrate", "--dsn", pg_dsn, "--schema", applied)
        assert first.returncode == 0, first.stderr
        assert first.stdout.startswith("applied migrations 0001")
        second = _run_cli("migrate", "--dsn", pg_dsn, "--schema", applied)
        assert second.returncode == 0, second.stderr
        assert "up to date" in second.stdout

        script = _run_cli("migrate", "--schema", printed, "--sql")
        assert script.returncode == 0, script.stderr
        assert "CREATE TABLE" in script.stdout
        assert applied not in script.stdout
        # Nothing was created by printing.
        assert db.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (printed,)
        ).fetchone() == (0,)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(script.stdout)
        assert _shape(db, printed) == _shape(db, applied)
        shipped = [(m.version, m.name) for m in all_migrations()]
        assert shipped[0] == (1, "initial")
        assert _shape(db, applied)["versions"] == shipped

        # The CLI sees the hand-run schema as up to date too.
        third = _run_cli("migrate", "--dsn", pg_dsn, "--schema", printed)
        assert third.returncode == 0, third.stderr
        assert "up to date" in third.stdout
    finally:
        for schema in (applied, printed):
            db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def skiplock_workers(app: App, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiplock", "workers", "--dsn", app.dsn, "--schema", app.schema,
         *options],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_skiplock_workers_lists_live_processes_and_keeps_a_killed_ones_row(
    workdir: Path, app: App, db: Any
) -> None:
    def listed() -> list[dict[str, Any]]:
        result = skiplock_workers(app, "--json")
        assert result.returncode == 0, result.stderr
        rows: list[dict[str, Any]] = json.loads(result.stdout)
        return rows

    empty = skiplock_workers(app)
    assert empty.returncode == 0 and "no worker has reported itself" in empty.stdout
    with worker_process(workdir, app, "--processes", "2", "--concurrency", "3", name="two") as w:
        rows = wait_for(lambda: (r := listed()) and len(r) == 2 and r, 30, "two workers listed")
        assert {(r["concurrency"], tuple(r["queues"]), r["silent"]) for r in rows} == {
            (3, ("default",), False)
        }
        pids = {r["pid"] for r in rows}
        assert len(pids) == 2 and w.proc.pid not in pids  # the supervisor's children
        table = skiplock_workers(app)
        assert table.returncode == 0 and all(r["id"] in table.stdout for r in rows)
        w.proc.send_signal(signal.SIGTERM)
        assert w.proc.wait(timeout=30) == 0, w.stderr
    assert listed() == []  # each child removed its row as it stopped

    with worker_process(workdir, app, name="killed") as w:
        (row,) = wait_for(listed, 30, "the worker listed")
        w.proc.kill()
        w.proc.wait(timeout=30)
    assert [r["id"] for r in listed()] == [row["id"]]  # left behind, to turn silent
