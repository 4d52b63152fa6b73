"""Reads off the primary (issue 47, part 3): ``skiplock status``, ``jobs list``, ``workers``,
the dashboard's pages and the metrics exporter read from a standby given as the read DSN, and
say how far behind it is; enqueues and every action still go to the primary.

The primary and its streaming standby are the tests' own (``pg_basebackup`` of a scratch
cluster, as in the failover tests).  The standby's replay is paused
(``pg_wal_replay_pause()``), so that what it shows is stale by a known amount: the jobs
enqueued after the pause are on the primary only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from helpers.dashboard_client import Browser, serving
from helpers.polling import wait_for
from helpers.role_logins import role_logins
from helpers.scratch_pg import ReplicatedPair, ServerUnavailable, replicated_pair
from skiplock import App
from skiplock.observability._exporter import QueueCollector

pytestmark = pytest.mark.slow

SCHEMA = "reads"
PAUSE = 1.5  # seconds the standby's replay stays paused before the checks


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicatedPair]:
    try:
        with replicated_pair("async") as started:
            yield started
    except ServerUnavailable as exc:
        if os.environ.get("SKIPLOCK_REQUIRE_FAILOVER"):  # where CI must run it
            raise
        pytest.skip(f"no scratch primary and standby here: {str(exc)[:300]}")


def _standby_dsn(pair: ReplicatedPair) -> str:
    assert pair.standby is not None
    return pair.standby.dsn


def _stubs(app: App) -> Any:
    @app.task(name="mail", queue="mail")
    def mail(to: str) -> None: ...

    return mail


def _pending(client: Any) -> int:
    return sum(r["pending"] for r in client.queue_status() if r["queue"] == "mail")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


def test_reads_come_from_the_standby_with_its_lag_shown_and_actions_go_to_the_primary(
    pair: ReplicatedPair,
) -> None:
    primary, standby = pair.primary.dsn, _standby_dsn(pair)
    app = App(primary, SCHEMA, read_dsn=standby)
    app.migrate()
    mail = _stubs(app)
    db = psycopg.connect(primary, autocommit=True)
    try:
        with role_logins(db, primary, SCHEMA) as roles:
            # skiplock roles' viewer, logged in on the standby: the roles came with the WAL.
            user = conninfo.conninfo_to_dict(roles.dsn["viewer"])["user"]
            viewer = conninfo.make_conninfo(standby, user=user)
            early = [mail.enqueue(to=f"a{n}@example.com").id for n in range(3)]
            wait_for(lambda: _pending(app.read_sync_client) == 3, timeout=30, what="replayed")
            caught_up = app.read_sync_client.read_lag()
            assert caught_up["standby"] is True and caught_up["lag_seconds"] == 0.0, caught_up
            with psycopg.connect(standby, autocommit=True) as conn:
                conn.execute("SELECT pg_wal_replay_pause()")
                try:
                    late = [mail.enqueue(to=f"b{n}@example.com").id for n in range(2)]
                    time.sleep(PAUSE)
                    _check_stale_reads(app, primary, standby, early, late)
                    _check_viewer(primary, viewer)
                finally:
                    conn.execute("SELECT pg_wal_replay_resume()")
            wait_for(lambda: _pending(app.read_sync_client) == 4, timeout=30, what="replayed")
            assert app.read_sync_client.read_lag()["lag_seconds"] == 0.0
    finally:
        db.close()
        app.sync_client.drop_schema()
        app.close()


def _check_viewer(primary: str, viewer: str) -> None:
    """The least-privilege viewer reads the same figures and lag on the standby."""
    app = App(primary, SCHEMA, read_dsn=viewer)
    try:
        assert _pending(app.read_sync_client) == 3
        lag = app.read_sync_client.read_lag()
        assert lag["receiving"] is True and lag["lag_seconds"] >= PAUSE * 0.9, lag
    finally:
        app.close()


def _check_stale_reads(
    app: App, primary: str, standby: str, early: list[int], late: list[int]
) -> None:
    # The clients: reads from the standby (3 jobs), writes and the primary's reads (5).
    assert _pending(app.read_sync_client) == 3
    assert _pending(app.sync_client) == 5
    lag = app.read_sync_client.read_lag()
    assert lag["standby"] is True and lag["receiving"] is True, lag
    assert lag["lag_seconds"] is not None and lag["lag_seconds"] >= PAUSE * 0.9, lag
    without = App(primary, SCHEMA)  # no read DSN: the reads stay on the primary
    try:
        assert without.read_sync_client is without.sync_client
        assert _pending(without.read_sync_client) == 5
    finally:
        without.close()

    # The command line.
    shown = _cli("status", "--dsn", primary, "--read-dsn", standby, "--schema", SCHEMA)
    assert shown.returncode == 0, shown.stderr
    assert "read from a standby" in shown.stdout and "behind the primary" in shown.stdout
    rows = _cli("status", "--dsn", primary, "--read-dsn", standby, "--schema", SCHEMA, "--json")
    assert [r["pending"] for r in json.loads(rows.stdout) if r["queue"] == "mail"] == [3]
    assert "behind the primary" in rows.stderr
    plain = _cli("status", "--dsn", primary, "--schema", SCHEMA, "--json")
    assert [r["pending"] for r in json.loads(plain.stdout) if r["queue"] == "mail"] == [5]
    assert "standby" not in plain.stderr
    listed = _cli("jobs", "list", "--dsn", primary, "--read-dsn", standby, "--schema", SCHEMA,
                  "--json")  # fmt: skip
    assert sorted(j["id"] for j in json.loads(listed.stdout)) == early, listed.stdout

    # The metrics exporter.
    metrics = {m.name: m for m in QueueCollector(app).collect()}
    behind = metrics["skiplock_exporter_read_lag_seconds"].samples[0].value
    assert behind >= PAUSE * 0.9
    depth = {tuple(s.labels.values()): s.value for s in metrics["skiplock_queue_jobs"].samples}
    assert depth[("mail", "pending")] == 3

    # The dashboard: pages from the standby, saying so; an action on the primary, and the page
    # it leads to read there too (it shows the change).
    with serving(app) as base:
        browser = Browser(base)
        queues = browser.log_in()
        assert queues.status == 200
        assert "This page was read from a standby" in queues.text, queues.text[:2000]
        jobs = browser.get("/jobs?queue=mail")
        for job in early:
            assert f"/jobs/{job}" in jobs.text
        for job in late:
            assert f'/jobs/{job}"' not in jobs.text
        assert browser.get(f"/jobs/{late[0]}").status == 404  # not on the standby yet
        csrf = queues.csrf() if 'name="csrf"' in queues.text else jobs.csrf()
        done = browser.post(f"/jobs/{late[0]}/cancel", {"csrf": csrf})
        assert done.status == 200 and "was cancelled" in (done.notice() or ""), done.text[:2000]
        assert "This page was read from a standby" not in done.text
    assert app.get_job(late[0]).status.value == "cancelled"  # type: ignore[union-attr]
