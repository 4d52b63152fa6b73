"""Listeners of job events: registered on the app (``@app.on_event``), heard by every worker
that runs it, ``skiplock worker`` included; one that fails never touches a job's outcome."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skiplock import App, FixedDelay, JobEvent, JobStatus, Worker


def test_app_listeners_and_on_event_hear_every_start_and_end(app: App) -> None:
    heard: list[tuple[str, str, int, str | None]] = []
    also: list[str] = []

    @app.on_event
    def broken(event: JobEvent) -> None:
        raise RuntimeError("a listener with a bug")

    @app.on_event
    def record(event: JobEvent) -> None:
        heard.append((event.kind, event.job.task, event.job.id, event.outcome))

    @app.task(name="ok")
    async def ok() -> None: ...

    @app.task(name="bad", max_attempts=2, retry=FixedDelay(0))
    def bad() -> None:
        raise ValueError("no")

    ok_id, bad_id = ok.enqueue().id, bad.enqueue().id
    worker = Worker(app, burst=True, poll_interval=0.05, on_event=lambda e: also.append(e.kind))
    stats = asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert (stats.done, stats.retried, stats.failed) == (1, 1, 1)
    assert sorted(heard) == sorted(
        [
            ("started", "ok", ok_id, None),
            ("finished", "ok", ok_id, "done"),
            ("started", "bad", bad_id, None),
            ("finished", "bad", bad_id, "retry"),
            ("started", "bad", bad_id, None),
            ("finished", "bad", bad_id, "failed"),
        ]
    )  # after a listener that raised every time
    assert sorted(also) == ["finished"] * 3 + ["started"] * 3
    job = app.get_job(ok_id)
    assert job is not None and job.status is JobStatus.DONE


MODULE = """
import os
from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])


@app.on_event
def report(event):
    if event.kind == "finished" and event.outcome == "failed":
        with open(os.environ["REPORT"], "a") as f:
            f.write(f"{event.job.id} {event.error.splitlines()[0]}\\n")


@app.task(name="doomed", max_attempts=1)
def doomed() -> None:
    raise ValueError("boom")
"""


@pytest.mark.slow
def test_the_cli_worker_calls_the_apps_listeners(tmp_path: Path, app: App) -> None:
    @app.task(name="doomed", max_attempts=1)
    def doomed() -> None: ...

    job_id = doomed.enqueue().id
    (tmp_path / "eventsmod.py").write_text(textwrap.dedent(MODULE))
    report = tmp_path / "report"
    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema, "REPORT": str(report)}
    env.pop("SKIPLOCK_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "skiplock", "worker", "eventsmod:app", "--dsn", app.dsn, "--burst"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert report.read_text() == f"{job_id} ValueError: boom\n"
