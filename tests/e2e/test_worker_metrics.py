"""``skiplock worker --metrics-port``: Prometheus metrics served by real worker processes.

Two processes under the supervisor are scraped on one port, the supervisor's: their counters
add up to the jobs the table says ran and failed, children recycled on the way included.  The
queue wait histogram counts the time from a job's due time to its start.  A port already
taken is a clear error at start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from helpers.polling import wait_for
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


def answers(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


def labelset(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def worker_ids(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    return {dict(labels)["worker_id"] for name, labels in scraped if name == "skiplock_worker_info"}


def counts(db: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    query = sql.SQL("SELECT status, count(*) FROM {} GROUP BY status")
    return dict(db.execute(query.format(sql.Identifier(schema, "jobs"))).fetchall())


def worker_env(app: App) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    env.update(DSN=app.dsn, SCHEMA=app.schema)
    return env


def test_processes_are_scraped_on_one_port_and_recycled_ones_are_neither_lost_nor_doubled(
    app: App, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """``--processes 2`` serves one endpoint, the supervisor's, whose counters add up every
    child's, including those replaced by ``--max-jobs`` on the way."""
    (tmp_path / "meteredmod.py").write_text(textwrap.dedent(MODULE))

    @app.task(name="ok", queue="metered")
    def ok(n: int) -> None: ...

    @app.task(name="boom", queue="metered", max_attempts=1)
    def boom(n: int) -> None: ...

    port = free_ports(2)
    command = [sys.executable, "-m", "skiplock", "worker", "meteredmod:app", "--processes", "2",
               "--concurrency", "4", "--poll-interval", "0.1", "--max-jobs", "40",
               "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"]  # fmt: skip
    log = tmp_path / "worker.stderr"
    with log.open("wb") as err:
        worker = subprocess.Popen(
            command, cwd=tmp_path, env=worker_env(app), stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        wait_for(lambda: answers(port) and len(worker_ids(scrape(port))) == 2, 30, "both processes")
        assert not answers(port + 1)  # one port for all processes
        # Series of the registered tasks and served queues exist, at 0, before any job.
        first = [scrape(port)]
        finished_name = "skiplock_jobs_finished_total"
        assert (finished_name, labelset(queue="metered", task="boom", outcome="failed")) in first[0]
        assert total(first, finished_name) == 0
        assert ("skiplock_jobs_started_total", labelset(queue="metered", task="ok")) in first[0]
        assert ("skiplock_jobs_running", labelset(queue="metered")) in first[0]
        wait_count = ("skiplock_job_wait_seconds_count", labelset(queue="metered", task="ok"))
        assert first[0][wait_count] == 0
        app.enqueue_many("ok", [{"n": n} for n in range(OK_JOBS)])
        app.enqueue_many("boom", [{"n": n} for n in range(BOOM_JOBS)])
        wait_for(
            lambda: counts(db, app.schema) == {"done": OK_JOBS, "failed": BOOM_JOBS},
            60,
            "every job done or failed",
        )

        def finished() -> float:
            return total([scrape(port)], finished_name)

        wait_for(lambda: finished() == OK_JOBS + BOOM_JOBS, 10, "the last outcomes' events")
        assert "recycled; starting a fresh one" in log.read_text()  # children were replaced
        samples = [scrape(port)]
        assert total(samples, finished_name, task="ok", outcome="done") == OK_JOBS
        assert total(samples, finished_name, task="boom", outcome="failed") == BOOM_JOBS
        assert total(samples, "skiplock_jobs_started_total", queue="metered") == 205
        assert total(samples, "skiplock_jobs_running", queue="metered") == 0
        assert total(samples, "skiplock_job_duration_seconds_count") == OK_JOBS + BOOM_JOBS
        assert total(samples, "skiplock_job_wait_seconds_count", queue="metered") == 205
        # The live processes only (the slot of one just recycled is filled again at once).
        wait_for(lambda: len(worker_ids(scrape(port))) == 2, 10, "both processes again")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_queue_wait_is_the_time_from_due_to_start(
    app: App, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Jobs due two minutes before a worker starts them waited at least that long: the queue
    wait histogram counts them above 60 s, none below."""
    (tmp_path / "meteredmod.py").write_text(textwrap.dedent(MODULE))
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, run_at) "
            "SELECT 'metered', 'ok', jsonb_build_object('n', i), now() - interval '120 seconds' "
            "FROM generate_series(1, 30) i"
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
        wait_for(lambda: counts(db, app.schema) == {"done": 30}, 60, "every job done")
        wait = "skiplock_job_wait_seconds"
        wait_for(lambda: total([scrape(port)], f"{wait}_count") == 30, 10, "the start events")
        samples = [scrape(port)]
        assert total(samples, f"{wait}_count", queue="metered", task="ok") == 30
        assert total(samples, f"{wait}_bucket", queue="metered", task="ok", le="60.0") == 0
        assert total(samples, f"{wait}_sum", queue="metered", task="ok") >= 30 * 120
        # Queue depth is the exporter's: not exported once per worker.
        assert not any(name.startswith("skiplock_queue_") for name, _ in samples[0])
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
        counted = {dict(labels).get("task") for _, labels in scrape(port)} - {None}
        assert counted == {"unknown", "ok", "boom"}  # the registered tasks' series are at 0
        ran = {dict(labels).get("task") for (_, labels), v in scrape(port).items() if v} - {None}
        assert ran == {"unknown"}
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
