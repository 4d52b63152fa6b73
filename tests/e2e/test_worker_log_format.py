"""``skiplock worker --log-format json``: every line the worker writes to stderr is one JSON
object, and a job's lines carry its id, task, queue and attempt as fields (issue 44), in one
process and under the supervisor (``--processes 2``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skiplock import App

pytestmark = pytest.mark.slow

SHOP = """
from skiplock import App

app = App(schema={schema!r})

@app.task(name="shop.ok", queue="logs")
def ok(n: int) -> None: ...

@app.task(name="shop.broken", queue="logs", max_attempts=1)
def broken(n: int) -> None:
    raise ValueError(f"no data for {{n}}")
"""


def run_worker(app: App, tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "shop.py").write_text(textwrap.dedent(SHOP.format(schema=app.schema)))
    return subprocess.run(
        [sys.executable, "-m", "skiplock", "worker", "shop:app", "--dsn", app.dsn, "--burst",
         "--log-format", "json", "--log-level", "debug", *options],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("processes", [1, 2])
def test_every_line_is_json_and_job_lines_carry_the_job(
    app: App, tmp_path: Path, processes: int
) -> None:
    for name in ("shop.ok", "shop.broken"):  # enqueued here, run by the worker's own app
        app.task(name=name, queue="logs", max_attempts=1)(lambda n: None)
    ok = app.enqueue("shop.ok", {"n": 1}).id
    broken = app.enqueue("shop.broken", {"n": 2}).id
    worker = run_worker(app, tmp_path, "--processes", str(processes))
    assert worker.returncode == 0, worker.stderr
    lines = [json.loads(line) for line in worker.stderr.splitlines()]  # every line parses
    assert all({"time", "level", "logger", "pid", "message"} <= set(r) for r in lines), lines
    finished = {r["job_id"]: r for r in lines if r.get("event") == "finished"}
    assert finished[ok]["outcome"] == "done" and finished[ok]["level"] == "DEBUG"
    failed = finished[broken]
    assert (failed["task"], failed["queue"], failed["attempt"], failed["max_attempts"]) == (
        "shop.broken",
        "logs",
        1,
        1,
    )
    assert failed["outcome"] == "failed" and failed["level"] == "WARNING"
    assert failed["error"] == "ValueError: no data for 2"
    started = [r for r in lines if r.get("event") == "started"]
    assert {r["job_id"] for r in started} == {ok, broken}
    assert all(isinstance(r["duration_ms"], float) for r in finished.values())


def test_a_wrong_format_is_a_usage_error(app: App, tmp_path: Path) -> None:
    worker = run_worker(app, tmp_path, "--log-format", "xml")
    assert worker.returncode == 2 and "xml" in worker.stderr, worker.stderr
