"""A newcomer's script that defines its tasks and enqueues when run directly
(``python shop.py``): Python names its module ``__main__``, so the job's task is
``__main__.send_receipt`` while a worker importing ``shop`` knows ``shop.send_receipt``. The
failed job says why and what to do, rather than to register the task as ``__main__...``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skiplock import App

pytestmark = pytest.mark.slow

SHOP = """
import os

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])


@app.task(queue="mail")
def send_receipt(order_id: int) -> None:
    print(f"receipt for order {order_id}")


if __name__ == "__main__":
    send_receipt.enqueue(order_id=7)
"""


def test_a_job_enqueued_by_a_script_run_directly_says_why_no_worker_knows_it(
    app: App, tmp_path: Path
) -> None:
    (tmp_path / "shop.py").write_text(textwrap.dedent(SHOP))
    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema}
    env = {k: v for k, v in env.items() if not k.startswith("SKIPLOCK_")}

    def run(*argv: str) -> None:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done

    run(sys.executable, "shop.py")
    run(sys.executable, "-m", "skiplock", "worker", "shop:app", "--queues", "mail", "--burst")
    (job,) = app.sync_client.list_jobs(status="failed")
    assert job.task == "__main__.send_receipt"
    error = job.last_error or ""
    assert "run directly" in error and "name=" in error, error
    assert "@app.task(name='__main__.send_receipt')" not in error, error
