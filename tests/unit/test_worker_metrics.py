"""What the Prometheus metrics make of a worker's job events (no server needed)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from skiplock.events import JobEvent
from skiplock.job import Job
from skiplock.observability.metrics import AggregateCollector, WorkerMetrics

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def job(job_id: int, queue: str = "mail", task: str = "send") -> Job:
    return Job(job_id, queue, task, {}, "running", 0, NOW, 1, 3, "w", None, None, None, None, NOW)


def value(metrics: WorkerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_started_and_finished_jobs_are_counted_by_queue_task_and_outcome() -> None:
    metrics = WorkerMetrics("host:1:abc", "0.1.0")
    for n in (1, 2, 3):
        metrics.on_event(JobEvent("started", job(n), "w"))
    metrics.on_event(JobEvent("started", job(4, "report", "build"), "w"))
    metrics.on_event(JobEvent("finished", job(1), "w", "done", 0.002))
    metrics.on_event(JobEvent("finished", job(2), "w", "retry", 0.2, "ValueError: no"))
    assert value(metrics, "skiplock_jobs_started_total", queue="mail", task="send") == 3
    assert value(metrics, "skiplock_jobs_started_total", queue="report", task="build") == 1
    finished = "skiplock_jobs_finished_total"
    assert value(metrics, finished, queue="mail", task="send", outcome="done") == 1
    assert value(metrics, finished, queue="mail", task="send", outcome="retry") == 1
    assert value(metrics, "skiplock_jobs_running", queue="mail") == 1
    assert value(metrics, "skiplock_jobs_running", queue="report") == 1
    duration = "skiplock_job_duration_seconds"
    assert value(metrics, f"{duration}_count", queue="mail", task="send") == 2
    assert value(metrics, f"{duration}_sum", queue="mail", task="send") == pytest.approx(0.202)
    assert value(metrics, f"{duration}_bucket", queue="mail", task="send", le="0.005") == 1
    assert value(metrics, "skiplock_worker_info", worker_id="host:1:abc", version="0.1.0") == 1


def test_a_job_given_back_unstarted_counts_as_finished_but_never_ran() -> None:
    """Jobs claimed ahead and released at shutdown (or cancelled) were never started: the
    running gauge must not go below zero and no duration is made up for them."""
    metrics = WorkerMetrics("w", "0.1.0")
    metrics.on_event(JobEvent("finished", job(9), "w", "release", 0.0))
    metrics.on_event(JobEvent("finished", job(9), "w", "cancelled", 0.0))
    finished = "skiplock_jobs_finished_total"
    assert value(metrics, finished, queue="mail", task="send", outcome="release") == 1
    assert value(metrics, "skiplock_jobs_running", queue="mail") is None  # never touched
    assert value(metrics, "skiplock_job_duration_seconds_count", queue="mail", task="send") is None


def test_each_worker_metrics_has_a_registry_of_its_own() -> None:
    first, second = WorkerMetrics("a", "0.1.0"), WorkerMetrics("b", "0.1.0")
    first.on_event(JobEvent("started", job(1), "a"))
    assert value(second, "skiplock_jobs_started_total", queue="mail", task="send") is None


def test_without_prometheus_client_the_error_names_the_extra() -> None:
    script = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from skiplock.observability.metrics import WorkerMetrics\n"
        "from skiplock import ConfigurationError\n"
        "try:\n    WorkerMetrics('w', '0')\n"
        "except ConfigurationError as exc:\n    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'skiplock[metrics]'" in result.stdout


def test_durations_fall_in_the_buckets_prometheus_expects() -> None:
    """``le`` is inclusive and cumulative; past the last bound only +Inf counts it."""
    metrics = WorkerMetrics("w", "0.1.0")
    for n, seconds in enumerate((0.005, 0.0051, 400.0), start=1):
        metrics.on_event(JobEvent("started", job(n), "w"))
        metrics.on_event(JobEvent("finished", job(n), "w", "done", seconds))
    bucket = "skiplock_job_duration_seconds_bucket"
    assert value(metrics, bucket, queue="mail", task="send", le="0.001") == 0
    assert value(metrics, bucket, queue="mail", task="send", le="0.005") == 1
    assert value(metrics, bucket, queue="mail", task="send", le="0.01") == 2
    assert value(metrics, bucket, queue="mail", task="send", le="300.0") == 2
    assert value(metrics, bucket, queue="mail", task="send", le="+Inf") == 3
    assert value(metrics, "skiplock_job_duration_seconds_count", queue="mail", task="send") == 3


def test_scrapes_on_another_thread_while_events_arrive_never_fail() -> None:
    """The HTTP server reads on its own thread while the worker's loop adds new label sets."""
    metrics = WorkerMetrics("w", "0.1.0")
    failures: list[BaseException] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            try:
                generate_latest(metrics.registry)
            except BaseException as exc:
                failures.append(exc)
                return

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for n in range(10_000):
            queue, task = f"q{n % 500}", f"t{n}"  # new keys: the dictionaries keep growing
            metrics.on_event(JobEvent("started", job(n, queue, task), "w"))
            metrics.on_event(JobEvent("finished", job(n, queue, task), "w", "done", 0.01))
    finally:
        done.set()
        scraper.join()
    assert failures == []
    assert sum(metrics._started.values()) == 10_000


def test_task_names_the_worker_does_not_know_fold_into_one_label() -> None:
    """Task names come from rows anyone who may enqueue can write: a label value per unknown
    name would grow the scrape without bound."""
    metrics = WorkerMetrics("w", "0.1.0", known_tasks=["send"])
    for n in range(2000):
        metrics.on_event(JobEvent("started", job(n, task=f"made-up-{n}"), "w"))
        metrics.on_event(JobEvent("finished", job(n, task=f"made-up-{n}"), "w", "failed", 0.01))
    metrics.on_event(JobEvent("started", job(5000), "w"))
    text = generate_latest(metrics.registry).decode()
    tasks = {label for label in re.findall(r'task="([^"]*)"', text)}
    assert tasks == {"send", "unknown"}
    finished = "skiplock_jobs_finished_total"
    assert value(metrics, finished, queue="mail", task="unknown", outcome="failed") == 2000
    assert value(metrics, "skiplock_jobs_started_total", queue="mail", task="send") == 1
    assert len(text.splitlines()) < 100


def claimed(job_id: int, waited: float) -> Job:
    """A job claimed ``waited`` seconds after it was due."""
    return dataclasses.replace(job(job_id), locked_at=NOW + timedelta(seconds=waited))


def test_queue_wait_is_claim_time_minus_due_time_and_known_series_start_at_zero() -> None:
    metrics = WorkerMetrics("w", "0.1.0", series=[("mail", "send"), ("report", "build")])
    wait = "skiplock_job_wait_seconds"
    assert value(metrics, f"{wait}_count", queue="report", task="build") == 0
    assert value(metrics, "skiplock_jobs_started_total", queue="report", task="build") == 0
    finished = "skiplock_jobs_finished_total"
    assert value(metrics, finished, queue="report", task="build", outcome="failed") == 0
    assert value(metrics, "skiplock_jobs_running", queue="report") == 0
    metrics.on_event(JobEvent("started", claimed(1, 0.02), "w"))
    metrics.on_event(JobEvent("started", claimed(2, 120.0), "w"))
    metrics.on_event(JobEvent("started", job(3), "w"))  # no claim time: not observed
    assert value(metrics, f"{wait}_count", queue="mail", task="send") == 2
    assert value(metrics, f"{wait}_sum", queue="mail", task="send") == pytest.approx(120.02)
    assert value(metrics, f"{wait}_bucket", queue="mail", task="send", le="0.05") == 1
    assert value(metrics, f"{wait}_bucket", queue="mail", task="send", le="60.0") == 1
    assert value(metrics, f"{wait}_bucket", queue="mail", task="send", le="300.0") == 2


def test_the_aggregate_keeps_an_exited_process_once_and_its_running_jobs_not_at_all(
    tmp_path: Path,
) -> None:
    live = {101, 102}
    for pid, worker_id in ((101, "a"), (102, "b")):
        metrics = WorkerMetrics(worker_id, "0.1.0")
        metrics.on_event(JobEvent("started", claimed(1, 1.0), worker_id))
        metrics.on_event(JobEvent("started", claimed(2, 1.0), worker_id))
        metrics.on_event(JobEvent("finished", job(1), worker_id, "done", 0.01))
        data = {"pid": pid, **metrics.snapshot().to_json()}
        (tmp_path / f"{worker_id}.json").write_text(json.dumps(data))
    registry = CollectorRegistry()
    registry.register(AggregateCollector(tmp_path, lambda: set(live), "0.1.0"))

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    started = "skiplock_jobs_started_total"
    assert sample(started, queue="mail", task="send") == 4
    assert sample("skiplock_jobs_running", queue="mail") == 2
    live.discard(102)  # b exited: its file is final
    for _ in range(3):  # retired on the first scrape, then counted from memory, once
        assert sample(started, queue="mail", task="send") == 4
        assert sample("skiplock_job_wait_seconds_count", queue="mail", task="send") == 4
        assert sample("skiplock_jobs_running", queue="mail") == 1
        assert sample("skiplock_worker_info", worker_id="b", version="0.1.0") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
