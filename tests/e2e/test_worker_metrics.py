"""``skiplock worker --metrics-port``: Prometheus metrics served by real worker processes.

Two processes under the supervisor serve on PORT and PORT + 1; scraped over HTTP, their
counters add up to the jobs the table says ran and failed.  A port already taken is a clear
error at start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from skiplock import App

pytestmark = pytest.mark.slow

MODULE = """
import os

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])


@app.task(name="ok", queue="metered")
def ok(n: int) -> None:
    pass


@app.task(name="boom", queue="metered", max_attempts=1)
def boom(n: int) -> None:
    raise ValueError("boom")
"""
OK_JOBS = 200
BOOM_JOBS = 5


def free_ports(count: int) -> int:
    """A port P with P .. P + count - 1 all free right now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65536:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise AssertionError("no run of free ports found")


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the endpoint: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: list[dict[Any, float]], name: str, **labels: str) -> float:
    """The sum over all processes of the samples of ``name`` that have ``labels``."""
    wanted = set(labels.items())
    return sum(
        value
        for scraped in samples
        for (sample_name, sample_labels), value in scraped.items()
        if sample_name == name and wanted <= sample_labels
    )


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)


def answers(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


def counts(db: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    query = sql.SQL("SELECT status, count(*) FROM {} GROUP BY status")
    return dict(db.execute(query.format(sql.Identifier(schema, "jobs"))).fetchall())


def worker_env(app: App) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    env.update(DSN=app.dsn, SCHEMA=app.schema)
    return env


def test_two_processes_serve_metrics_that_add_up_to_the_jobs_run(
    app: App, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    (tmp_path / "meteredmod.py").write_text(textwrap.dedent(MODULE))

    @app.task(name="ok", queue="metered")
    def ok(n: int) -> None: ...

    @app.task(name="boom", queue="metered", max_attempts=1)
    def boom(n: int) -> None: ...

    port = free_ports(2)
    command = [sys.executable, "-m", "skiplock", "worker", "meteredmod:app", "--processes", "2",
               "--concurrency", "4", "--poll-interval", "0.1",
               "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"]  # fmt: skip
    log = tmp_path / "worker.stderr"
    with log.open("wb") as err:
        worker = subprocess.Popen(
            command, cwd=tmp_path, env=worker_env(app), stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        wait_for(lambda: answers(port) and answers(port + 1), 30, "both metrics endpoints")
        app.enqueue_many("ok", [{"n": n} for n in range(OK_JOBS)])
        app.enqueue_many("boom", [{"n": n} for n in range(BOOM_JOBS)])
        wait_for(
            lambda: counts(db, app.schema) == {"done": OK_JOBS, "failed": BOOM_JOBS},
            60,
            "every job done or failed",
        )

        def finished() -> float:
            samples = [scrape(port), scrape(port + 1)]
            return total(samples, "skiplock_jobs_finished_total")

        wait_for(lambda: finished() == OK_JOBS + BOOM_JOBS, 10, "the last outcomes' events")
        samples = [scrape(port), scrape(port + 1)]
        finished_name = "skiplock_jobs_finished_total"
        assert total(samples, finished_name, task="ok", outcome="done") == OK_JOBS
        assert total(samples, finished_name, task="boom", outcome="failed") == BOOM_JOBS
        assert total(samples, "skiplock_jobs_started_total", queue="metered") == 205
        assert total(samples, "skiplock_jobs_running", queue="metered") == 0
        assert total(samples, "skiplock_job_duration_seconds_count") == OK_JOBS + BOOM_JOBS
        worker_ids = {
            dict(labels)["worker_id"]
            for scraped in samples
            for (name, labels) in scraped
            if name == "skiplock_worker_info"
        }
        assert len(worker_ids) == 2, worker_ids  # one per process, each on its own port
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_a_metrics_port_already_taken_stops_the_worker_with_a_clear_error(
    app: App, tmp_path: Path
) -> None:
    (tmp_path / "meteredmod.py").write_text(textwrap.dedent(MODULE))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "skiplock", "worker", "meteredmod:app", "--burst",
                   "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"]  # fmt: skip
        result = subprocess.run(
            command, cwd=tmp_path, env=worker_env(app), capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 1, result.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use" in result.stderr


def listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses a socket on this host listens on at ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_metrics_listen_on_localhost_unless_told_and_unknown_task_names_fold_into_one(
    app: App, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    (tmp_path / "meteredmod.py").write_text(textwrap.dedent(MODULE))
    # Rows whose task no worker knows: written by SQL, as any producer may.
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload) "
            "SELECT 'metered', 'made-up-' || i, '{{}}' FROM generate_series(1, 40) i"
        ).format(sql.Identifier(app.schema, "jobs"))
    )
    port = free_ports(1)
    command = [sys.executable, "-m", "skiplock", "worker", "meteredmod:app",
               "--poll-interval", "0.1", "--metrics-port", str(port)]  # fmt: skip
    log = tmp_path / "worker.stderr"
    with log.open("wb") as err:
        worker = subprocess.Popen(
            command, cwd=tmp_path, env=worker_env(app), stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        wait_for(lambda: answers(port), 30, "the metrics endpoint")
        assert listening_addresses(port) == {"127.0.0.1"}
        assert f"serving metrics on http://127.0.0.1:{port}/metrics" in log.read_text()
        wait_for(lambda: counts(db, app.schema) == {"failed": 40}, 60, "every job failed")

        def failed() -> float:
            return total([scrape(port)], "skiplock_jobs_finished_total", outcome="failed")

        wait_for(lambda: failed() == 40, 10, "the last outcomes' events")
        tasks = {dict(labels).get("task") for _, labels in scrape(port)} - {None}
        assert tasks == {"unknown"}
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
