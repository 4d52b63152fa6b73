"""``skiplock metrics``: queue depth and the oldest due job's age per queue, read from the
database at scrape time, once per cluster; and the docs' alert rules and Grafana dashboard,
whose every metric name a real worker or exporter exports.

Both endpoints' output passes ``promtool check metrics`` and the alert rules pass ``promtool
check rules``.  Without promtool (Debian's ``prometheus`` package) those tests are skipped,
unless ``SKIPLOCK_REQUIRE_PROMTOOL`` is set (``.ci/run`` sets it), which makes its absence a
failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest
from psycopg import sql

from skiplock import App

from .test_worker_metrics import (
    MODULE,
    answers,
    counts,
    free_ports,
    labelset,
    listening_addresses,
    scrape,
    total,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.slow

REQUIRE_VAR = "SKIPLOCK_REQUIRE_PROMTOOL"
DOCS = Path(__file__).parents[2] / "docs"
ALERT_RULES = DOCS / "prometheus" / "skiplock-alerts.yml"
DASHBOARD = DOCS / "grafana" / "skiplock-dashboard.json"


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE_VAR):
        pytest.fail(f"{REQUIRE_VAR} is set but {reason}")
    pytest.skip(reason)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        _unavailable("promtool is not installed (apt-get install prometheus)")
    return found


def text_of(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def check_metrics(text: str) -> None:
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def insert_jobs(db: psycopg.Connection[Any], app: App) -> None:
    """Per queue: 3 due for 100 s, 2 scheduled, 1 running, 1 failed in 'mail'; 1 due in
    'report'."""
    jobs = sql.Identifier(app.schema, "jobs")
    statements = [
        "INSERT INTO {} (queue, task, payload, run_at) SELECT 'mail', 'send', '{{}}', "
        "now() - interval '100 seconds' FROM generate_series(1, 3)",
        "INSERT INTO {} (queue, task, payload, status, run_at) SELECT 'mail', 'send', '{{}}', "
        "'scheduled', now() + interval '1 hour' FROM generate_series(1, 2)",
        "INSERT INTO {} (queue, task, payload, status, locked_by, locked_until, locked_at, "
        "attempts) VALUES ('mail', 'send', '{{}}', 'running', 'w', now() + interval '1 hour', "
        "now(), 1)",
        "INSERT INTO {} (queue, task, payload, status, finished_at, attempts, max_attempts) "
        "VALUES ('mail', 'send', '{{}}', 'failed', now(), 1, 1)",
        "INSERT INTO {} (queue, task, payload) VALUES ('report', 'build', '{{}}')",
    ]
    for statement in statements:
        db.execute(sql.SQL(statement).format(jobs))


@contextmanager
def running_exporter(app: App, schema: str, log: Path) -> Iterator[int]:
    """A ``skiplock metrics`` process on ``schema``; its port."""
    port = free_ports(1)
    command = [sys.executable, "-m", "skiplock", "metrics", "--schema", schema,
               "--port", str(port)]  # fmt: skip
    env = worker_env(app)
    env["SKIPLOCK_DATABASE_URL"] = app.dsn
    with log.open("wb") as err:
        process = subprocess.Popen(
            command, cwd=log.parent, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        wait_for(lambda: answers(port) or process.poll() is not None, 30, "the exporter")
        assert process.poll() is None, log.read_text()
        yield port
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def exporter(app: App, tmp_path: Path) -> Iterator[int]:
    """A ``skiplock metrics`` process on the test's schema; its port."""
    with running_exporter(app, app.schema, tmp_path / "exporter.stderr") as port:
        yield port


def test_the_exporter_reads_queue_depth_and_oldest_due_age_at_scrape_time(
    app: App, db: psycopg.Connection[Any], exporter: int
) -> None:
    assert listening_addresses(exporter) == {"127.0.0.1"}
    assert total([scrape(exporter)], "skiplock_queue_jobs") == 0  # nothing yet: read per scrape
    insert_jobs(db, app)
    samples = scrape(exporter)
    depth = "skiplock_queue_jobs"
    assert samples[(depth, labelset(queue="mail", status="pending"))] == 3
    assert samples[(depth, labelset(queue="mail", status="scheduled"))] == 2
    assert samples[(depth, labelset(queue="mail", status="running"))] == 1
    assert samples[(depth, labelset(queue="mail", status="failed"))] == 1
    assert samples[(depth, labelset(queue="report", status="pending"))] == 1
    assert samples[(depth, labelset(queue="report", status="failed"))] == 0
    oldest = "skiplock_queue_oldest_due_job_age_seconds"
    assert samples[(oldest, labelset(queue="mail"))] >= 100
    assert samples[(oldest, labelset(queue="report"))] < 100
    assert samples[("skiplock_queue_workers", labelset(queue="mail"))] == 0
    assert samples[("skiplock_exporter_database_up", frozenset())] == 1


def test_a_failed_read_is_reported_as_database_down_not_as_an_http_error(
    app: App, tmp_path: Path
) -> None:
    log = tmp_path / "exporter.stderr"
    with running_exporter(app, app.schema + "_missing", log) as port:
        samples = scrape(port)
        assert samples[("skiplock_exporter_database_up", frozenset())] == 0
        assert not any(name.startswith("skiplock_queue_") for name, _ in samples)
    assert "could not read the queues" in log.read_text()


def test_the_exporter_output_passes_promtool(
    app: App, db: psycopg.Connection[Any], exporter: int
) -> None:
    insert_jobs(db, app)
    check_metrics(text_of(exporter))


def rule_expressions() -> list[str]:
    """The ``expr:`` of every alert rule (each on one line, as the file keeps them)."""
    lines = ALERT_RULES.read_text().splitlines()
    found = [
        line.split("expr:", 1)[1].strip() for line in lines if line.strip().startswith("expr:")
    ]
    assert found, "no expr: line in the alert rules"
    return found


def dashboard_expressions() -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            # A panel's query (expr), a template variable's (query, definition).
            found.extend(
                v for k in ("expr", "query", "definition") if isinstance(v := node.get(k), str)
            )
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(DASHBOARD.read_text()))
    assert found, "no query in the dashboard"
    return found


def test_the_alert_rules_pass_promtool() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(ALERT_RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = set(re.findall(r"^\s*- alert:\s*(\w+)", ALERT_RULES.read_text(), re.M))
    expected = {"SkiplockQueueWaitHigh", "SkiplockOldestDueJobOld", "SkiplockJobFailureRateHigh",
                "SkiplockNoWorker"}  # fmt: skip
    assert expected <= alerts, alerts


def test_every_metric_the_docs_query_is_exported_by_a_worker_or_the_exporter(
    app: App, db: psycopg.Connection[Any], exporter: int, tmp_path: Path
) -> None:
    """Run a worker (one job done, one failed) and the exporter, scrape both, check both with
    promtool, and look up every ``skiplock_*`` name of the alert rules and the dashboard."""
    (tmp_path / "meteredmod.py").write_text(textwrap.dedent(MODULE))

    @app.task(name="ok", queue="metered")
    def ok(n: int) -> None: ...

    @app.task(name="boom", queue="metered", max_attempts=1)
    def boom(n: int) -> None: ...

    port = free_ports(1)
    command = [sys.executable, "-m", "skiplock", "worker", "meteredmod:app",
               "--poll-interval", "0.1", "--metrics-port", str(port)]  # fmt: skip
    log = tmp_path / "worker.stderr"
    with log.open("wb") as err:
        worker = subprocess.Popen(
            command, cwd=tmp_path, env=worker_env(app), stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        wait_for(lambda: answers(port), 30, "the worker's metrics endpoint")
        app.enqueue("ok", {"n": 1})
        app.enqueue("boom", {"n": 2})
        wait_for(lambda: counts(db, app.schema) == {"done": 1, "failed": 1}, 60, "both jobs")
        wait_for(
            lambda: total([scrape(port)], "skiplock_job_duration_seconds_count") == 2,
            10,
            "the outcomes' events",
        )
        worker_text = text_of(port)
        exporter_text = text_of(exporter)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    exported = {
        line.split("{")[0].split(" ")[0]
        for line in (worker_text + exporter_text).splitlines()
        if line and not line.startswith("#")
    }
    used = {
        name
        for expr in rule_expressions() + dashboard_expressions()
        for name in re.findall(r"\bskiplock_[a-z0-9_]+\b", expr)
    }
    assert used, "the docs query no skiplock metric"
    assert used <= exported, sorted(used - exported)
    check_metrics(worker_text)
    check_metrics(exporter_text)
