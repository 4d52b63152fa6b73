"""``skiplock worker`` as a real process behind a real PgBouncer in transaction mode.

What docs/operations.md promises there: with ``SKIPLOCK_PREPARED_STATEMENTS=off`` the worker
runs every job exactly once through the pooler; LISTEN cannot work there, which the worker
detects and says (and then lives on its polls); ``--poll-only`` does not try.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.pgbouncer import running_pgbouncer
from helpers.polling import wait_for
from skiplock import App

pytestmark = pytest.mark.slow

MODULE = """
import os

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])


@app.task(name="note", queue="pooled")
def note(n: int) -> None:
    pass
"""
NOT_HEARD = "LISTEN/NOTIFY does not reach this worker"
JOBS = 400


@pytest.fixture(scope="module")
def pooled_dsn(pg_dsn: str) -> Iterator[str]:
    with running_pgbouncer(pg_dsn, pool_mode="transaction", pool_size=3) as dsn:
        yield dsn


def counts(db: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    query = sql.SQL("SELECT status, count(*) FROM {} GROUP BY status")
    rows = db.execute(query.format(sql.Identifier(schema, "jobs"))).fetchall()
    return {status: count for status, count in rows}


@pytest.mark.parametrize("poll_only", [False, True], ids=["listen", "poll-only"])
def test_the_worker_runs_every_job_once_through_a_transaction_pooler(
    poll_only: bool,
    pooled_dsn: str,
    app: App,
    db: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    (tmp_path / "pooledmod.py").write_text(textwrap.dedent(MODULE))

    @app.task(name="note", queue="pooled")
    def note(n: int) -> None: ...

    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    env.update(DSN=pooled_dsn, SCHEMA=app.schema, SKIPLOCK_PREPARED_STATEMENTS="off")
    command = [sys.executable, "-m", "skiplock", "worker", "pooledmod:app",
               "--concurrency", "4", "--poll-interval", "0.1"]  # fmt: skip
    log = tmp_path / "worker.stderr"
    with log.open("wb") as err:
        worker = subprocess.Popen(
            command + (["--poll-only"] if poll_only else []),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for(lambda: "started" in log.read_text(), 20, "the worker to start")
        # Enqueued directly (not through the pooler), in rounds while the worker runs.
        for start in range(0, JOBS, 100):
            app.enqueue_many("note", [{"n": n} for n in range(start, start + 100)])
        wait_for(lambda: counts(db, app.schema) == {"done": JOBS}, 60, "every job done")
        if poll_only:
            time.sleep(2.5)  # as long as a listening worker's probe waits
        else:
            wait_for(lambda: NOT_HEARD in log.read_text(), 10, "the LISTEN probe's verdict")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    said = log.read_text()
    assert (NOT_HEARD in said) is not poll_only, said
    assert "prepared statement" not in said, said  # no mixups, and no advice it doesn't need
    assert f"claimed={JOBS} done={JOBS} retried=0 failed=0" in said, said
    attempts = db.execute(
        sql.SQL("SELECT min(attempts), max(attempts) FROM {}").format(
            sql.Identifier(app.schema, "jobs")
        )
    ).fetchone()
    assert attempts == (1, 1)
