"""Connection slots against a server of the tests' own with a small ``max_connections``
(issue 47, part 1): the sessions a worker process holds at its most, measured, against
:func:`~skiplock._db.connections.worker_connections` and ``skiplock doctor --workers``'s
headroom figure; and a worker that finds no slot free waits for one, saying so, instead of
exiting.

The server is a scratch cluster (``initdb`` + ``pg_ctl`` on a free port: never the shared
test server, whose ``max_connections`` the other tests need).  The workers log in as a role
that is not a superuser, so ``superuser_reserved_connections`` applies to them as it would
in production.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from psycopg import conninfo

from helpers.polling import wait_for
from skiplock import App
from skiplock._db.connections import worker_connections
from skiplock._doctor.command import Doctor, Thresholds

pytestmark = pytest.mark.slow

MAX_CONNECTIONS = 30
RESERVED = 4
ROLE = "slots_worker"

MODULE = """
import asyncio
import os
from pathlib import Path

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])


@app.task(name="nap_leased", queue="leased")
async def nap_leased(ms: float) -> None:
    await asyncio.sleep(ms / 1000)


@app.task(name="nap_held", queue="held", model="held")
async def nap_held(ms: float) -> None:
    await asyncio.sleep(ms / 1000)


@app.task(name="mark")
def mark() -> None:
    Path(os.environ["MARK"]).write_text("ran")
"""


class Server:
    def __init__(self, dsn: str, worker_dsn: str) -> None:
        self.dsn = dsn  # the superuser's
        self.worker_dsn = worker_dsn


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    from helpers.scratch_pg import ScratchCluster, find_pg_bindir

    if find_pg_bindir() is None:
        pytest.skip("no initdb/pg_ctl for a server with a small max_connections")
    cluster = ScratchCluster()
    cluster.settings.update(
        max_connections=str(MAX_CONNECTIONS), superuser_reserved_connections=str(RESERVED)
    )
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN")
            conn.execute(f"GRANT CREATE ON DATABASE postgres TO {ROLE}")
        yield Server(cluster.dsn, conninfo.make_conninfo(cluster.dsn, user=ROLE))
    finally:
        cluster.destroy()


@pytest.fixture
def schema(server: Server) -> Iterator[str]:
    name = f"slots_{os.getpid()}_{time.monotonic_ns() % 10**6}"
    app = App(server.worker_dsn, name)
    app.migrate()  # owned by the workers' role
    try:
        yield name
    finally:
        app.sync_client.drop_schema()
        app.sync_client.close()


def _stubs(app: App) -> dict[str, Any]:
    """The worker module's tasks, registered here to enqueue them."""

    @app.task(name="nap_leased", queue="leased")
    async def nap_leased(ms: float) -> None: ...

    @app.task(name="nap_held", queue="held", model="held")
    async def nap_held(ms: float) -> None: ...

    @app.task(name="mark")
    def mark() -> None: ...

    return {"leased": nap_leased, "held": nap_held, "mark": mark}


def _left(app: App) -> int:
    """Jobs not finished yet."""
    rows = app.sync_client.queue_status()
    return sum(r["pending"] + r["running"] + r["scheduled"] for r in rows)


def _start_worker(
    tmp_path: Path, server: Server, schema: str, *args: str, name: str = "w"
) -> tuple[subprocess.Popen[bytes], Path]:
    (tmp_path / "slotsmod.py").write_text(textwrap.dedent(MODULE))
    env = {**os.environ, "DSN": server.worker_dsn, "SCHEMA": schema,
           "MARK": str(tmp_path / "mark")}  # fmt: skip
    env.pop("SKIPLOCK_DATABASE_URL", None)
    log = tmp_path / f"{name}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skiplock", "worker", "slotsmod:app", *args],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    return proc, log


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


class SessionSampler:
    """The most sessions each worker process holds at once, sampled every few milliseconds:
    a backend belongs to the process that owns its client port."""

    def __init__(self, dsn: str, pids: list[int]) -> None:
        self.dsn = dsn
        self.pids = pids
        self.most: dict[int, int] = defaultdict(int)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> SessionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.005):
                ports = {
                    int(port)
                    for (port,) in conn.execute(
                        "SELECT client_port FROM pg_stat_activity WHERE usename = %s"
                        " AND client_port IS NOT NULL",
                        (ROLE,),
                    )
                }
                for pid in self.pids:
                    try:
                        mine = {
                            c.laddr.port
                            for c in psutil.Process(pid).net_connections(kind="tcp")
                            if c.laddr
                        }
                    except psutil.NoSuchProcess:
                        continue
                    self.most[pid] = max(self.most[pid], len(mine & ports))


def test_sessions_per_worker_process_stay_within_the_doctors_figure(
    tmp_path: Path, server: Server, schema: str
) -> None:
    """A leased worker (concurrency 4) and a held-lock one (concurrency 3) drain short jobs;
    the most sessions each held at once is at most what doctor counts per process, and
    doctor's headroom for a fleet is the usable slots less the others' sessions and the
    fleet's."""
    app = App(server.worker_dsn, schema)
    tasks = _stubs(app)
    tasks["leased"].enqueue_many([{"ms": 5.0}] * 400)
    tasks["held"].enqueue_many([{"ms": 5.0}] * 150)
    leased, leased_log = _start_worker(
        tmp_path, server, schema, "--queues", "leased", "--concurrency", "4", name="leased"
    )
    held, held_log = _start_worker(
        tmp_path, server, schema, "--queues", "held", "--concurrency", "3", "--model", "held",
        name="held",
    )  # fmt: skip
    try:
        with SessionSampler(server.dsn, [leased.pid, held.pid]) as sampler:
            wait_for(lambda: _left(app) == 0, timeout=120, what=lambda: _left(app))
            time.sleep(1.0)  # the pools' idle connections and the listeners stay
        most = dict(sampler.most)
    finally:
        codes = [_stop(leased), _stop(held)]
        app.sync_client.close()
    assert codes == [0, 0], (leased_log.read_text()[-2000:], held_log.read_text()[-2000:])
    leased_bound = worker_connections(4)
    held_bound = worker_connections(3, held=True)
    print(f"most sessions: leased {most[leased.pid]} (bound {leased_bound}), "
          f"held {most[held.pid]} (bound {held_bound})")  # fmt: skip
    assert 2 <= most[leased.pid] <= leased_bound, most
    assert 2 <= most[held.pid] <= held_bound, most

    # doctor, for fleets of such workers: the headroom figure and where it turns.
    per = worker_connections(4)
    usable = MAX_CONNECTIONS - RESERVED

    def connections(workers: int) -> Any:
        found = Doctor(
            server.dsn, schema, Thresholds(connections_per_worker=per, workers=workers)
        ).run()
        return next(f for f in found if f.check == "connections")

    # An enqueuer's session (named skiplock, not a worker's) stays beside the fleet.
    enqueuer = App(server.worker_dsn, schema)
    try:
        _stubs(enqueuer)["mark"].enqueue()
        with_enqueuer = connections(1).details["others"]
    finally:
        enqueuer.close()
    small = connections(1)
    others = small.details["others"]
    assert with_enqueuer == others + 1, (with_enqueuer, others)
    assert small.details["usable"] == usable
    assert small.details["headroom"] == usable - others - per
    assert small.status == "ok", small
    fits = (usable - others) // per  # the most workers that fit
    assert connections(fits).status in ("ok", "warn")
    over = connections(fits + 1)
    assert over.status == "fail" and over.details["headroom"] < 0, over
    assert "exhausts" in over.message and "max_connections" in over.fix
    # The command line's options give the same figure.
    cli = subprocess.run(
        [sys.executable, "-m", "skiplock", "doctor", "--dsn", server.dsn, "--schema", schema,
         "--json", "--workers", str(fits + 1), "--concurrency", "4"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    found = {f["check"]: f for f in json.loads(cli.stdout)["findings"]}
    assert cli.returncode == 1 and found["connections"]["status"] == "fail", cli.stdout
    assert found["connections"]["details"]["fleet_needs"] == (fits + 1) * per
    held = subprocess.run(
        [sys.executable, "-m", "skiplock", "doctor", "--dsn", server.dsn, "--schema", schema,
         "--json", "--workers", "1", "--concurrency", "3", "--model", "held"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    found = {f["check"]: f for f in json.loads(held.stdout)["findings"]}
    assert found["connections"]["details"]["per_worker"] == held_bound


def test_a_worker_with_no_slot_free_waits_for_one_then_runs(
    tmp_path: Path, server: Server, schema: str
) -> None:
    """Every slot a non-superuser may take is held: the worker says why it cannot start,
    stays up and tries again (it used to exit 1 at once, and a process manager restarted it in
    a loop); once slots free, it starts and runs the waiting job."""
    app = App(server.worker_dsn, schema)
    _stubs(app)["mark"].enqueue()
    app.sync_client.close()
    taken: list[psycopg.Connection[Any]] = []
    try:
        while True:
            try:
                taken.append(psycopg.connect(server.worker_dsn))
            except psycopg.OperationalError as exc:
                assert "reserved" in str(exc) or "too many" in str(exc), exc
                break
        proc, log = _start_worker(tmp_path, server, schema, "--concurrency", "2")
        wait_for(lambda: log.read_text().count("trying again") >= 2, timeout=20,
                 what=lambda: log.read_text()[-1500:])  # fmt: skip
        assert proc.poll() is None, log.read_text()[-2000:]
        text = log.read_text()
        assert "no connection slot free" in text and "max_connections" in text, text[-2000:]
        assert not (tmp_path / "mark").exists()
    finally:
        for conn in taken:
            conn.close()
    try:
        wait_for(lambda: (tmp_path / "mark").exists(), timeout=45,
                 what=lambda: log.read_text()[-1500:])  # fmt: skip
    finally:
        code = _stop(proc)
    assert code == 0, log.read_text()[-2000:]


def test_a_worker_stopped_while_it_waits_for_a_slot_exits_cleanly(
    tmp_path: Path, server: Server, schema: str
) -> None:
    taken: list[psycopg.Connection[Any]] = []
    try:
        while True:
            try:
                taken.append(psycopg.connect(server.worker_dsn))
            except psycopg.OperationalError:
                break
        proc, log = _start_worker(tmp_path, server, schema)
        wait_for(lambda: "trying again" in log.read_text(), timeout=20,
                 what=lambda: log.read_text()[-1500:])  # fmt: skip
        started = time.monotonic()
        code = _stop(proc)
        assert code == 0, log.read_text()[-2000:]
        assert time.monotonic() - started < 5
    finally:
        for conn in taken:
            conn.close()


def test_a_fleet_larger_than_the_server_allows_runs_every_job_once_without_a_restart(
    tmp_path: Path, server: Server, schema: str
) -> None:
    """Six worker processes at concurrency 10 could hold 48 sessions; other sessions leave
    their role 10 of its 26 slots.  The processes that find no slot at start wait for one (they
    used to exit 1, for the supervisor to restart them again and again), the pools of those
    that started stop growing at the limit and wait for a connection, none exits, and every
    job runs once."""
    app = App(server.worker_dsn, schema)
    tasks = _stubs(app)
    ids = [e.id for e in tasks["leased"].enqueue_many([{"ms": 20.0}] * 1500)]
    processes, left_free = 6, 10
    assert processes * worker_connections(10) > left_free
    others = [psycopg.connect(server.worker_dsn)
              for _ in range(MAX_CONNECTIONS - RESERVED - left_free - 1)]  # fmt: skip
    supervisor, log = _start_worker(
        tmp_path, server, schema, "--queues", "leased", "--concurrency", "10",
        "--processes", str(processes), name="fleet",
    )  # fmt: skip
    try:
        wait_for(lambda: _left(app) == 0, timeout=180, what=lambda: _left(app))
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            rows = conn.execute(
                f'SELECT status, attempts, count(*) FROM "{schema}".jobs'
                " WHERE id = ANY(%s) GROUP BY 1, 2",
                (ids,),
            ).fetchall()
    finally:
        code = _stop(supervisor)
        app.sync_client.close()
        for conn in others:
            conn.close()
    text = log.read_text()
    print(f"at the limit: {text.count('cannot start')} waits at start logged")
    assert rows == [("done", 1, len(ids))], rows
    assert "cannot start" in text, text[-3000:]
    assert "restarting in" not in text, text[-3000:]
    assert code == 0, text[-3000:]
