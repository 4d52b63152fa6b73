"""``Task.enqueue`` is typed from the task's own signature: mypy (strict) flags a misspelt or
mistyped argument and a missing one, and accepts the enqueue options (``conn=``), for tasks
made by ``@app.task``, by ``@app.periodic`` (with ``pass_context=True`` too) and by both."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import skiplock

pytestmark = pytest.mark.slow

SOURCE = """
from __future__ import annotations

import psycopg

from skiplock import App, JobContext

app = App()


@app.task(queue="mail", max_attempts=2)
def send_receipt(order_id: int, copy: bool = False) -> None: ...


@app.task(pass_context=True)
def audit(ctx: JobContext, order_id: int) -> str:
    return ctx.worker_id


@app.periodic(every=60.0, pass_context=True)
def sweep(ctx: JobContext, depth: int = 1) -> None: ...


@app.periodic(every=60.0)
@app.task(pass_context=True)
def tidy(ctx: JobContext, depth: int = 1) -> None: ...


@app.periodic(every=60.0)
@app.task(queue="cron")
def report(day: str = "") -> None: ...


def fine(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    send_receipt.enqueue(order_id=7)
    send_receipt.enqueue(order_id=7, copy=True, conn=conn)
    send_receipt.with_options(priority=3).enqueue(order_id=7)
    audit.enqueue(order_id=1)
    send_receipt(7)
    send_receipt.enqueue(conn, order_id=7)
    sweep.enqueue(depth=2)
    tidy.enqueue(depth=2)
    report.enqueue(day="monday")


async def fine_async() -> None:
    await send_receipt.enqueue_async(order_id=7)
    await audit.with_options(delay=5).enqueue_async(order_id=1)


def wrong() -> None:
    send_receipt.enqueue(order_idd=7)  # wrong
    send_receipt.enqueue(order_id="7")  # wrong
    send_receipt.enqueue(copy=True)  # wrong
    send_receipt.with_options(priority=3).enqueue(order_idd=7)  # wrong
    audit.enqueue(order_idd=1)  # wrong
    sweep.enqueue(deep=2)  # wrong
    tidy.enqueue(deep=2)  # wrong
    report.enqueue(days="monday")  # wrong
"""


def test_mypy_checks_enqueue_against_the_tasks_signature(tmp_path: Path) -> None:
    source = textwrap.dedent(SOURCE).lstrip()
    (tmp_path / "shop.py").write_text(source)
    src = Path(skiplock.__file__).parent.parent
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         "--config-file", os.devnull, "--follow-imports", "silent", "shop.py"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(src)}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    lines = source.splitlines()
    flagged = {int(line.split(":")[1]) for line in result.stdout.splitlines() if ": error:" in line}
    wrong = {n for n, text in enumerate(lines, 1) if text.endswith("# wrong")}
    assert len(wrong) == 8, wrong
    assert flagged == wrong, result.stdout + result.stderr


@pytest.mark.skipif(
    shutil.which("node") is None and not os.environ.get("SKIPLOCK_REQUIRE_NODE"),
    reason="pyright needs Node.js (node); SKIPLOCK_REQUIRE_NODE=1 makes its absence fail",
)
def test_pyright_checks_enqueue_against_the_tasks_signature(tmp_path: Path) -> None:
    """The same file under pyright (strict): the same lines are flagged, no others.  pyright's
    PyPI package runs its JavaScript on the machine's Node.js."""
    source = textwrap.dedent(SOURCE).lstrip()
    (tmp_path / "shop.py").write_text(source)
    src = Path(skiplock.__file__).parent.parent
    config = {"typeCheckingMode": "strict", "extraPaths": [str(src)], "include": ["shop.py"]}
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    result = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.stdout.strip().startswith("{"), result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    flagged = {
        d["range"]["start"]["line"] + 1
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    }
    lines = source.splitlines()
    wrong = {n for n, text in enumerate(lines, 1) if text.endswith("# wrong")}
    assert flagged == wrong, json.dumps(report["generalDiagnostics"], indent=1)[:4000]
