"""The workers table: a running Worker reports itself and what it runs, removes itself when it
stops; a killed worker's row turns silent and the maintenance leader forgets it."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from typing import Any

import pytest

import skiplock
from helpers.polling import wait_for_async
from skiplock import App, Worker
from skiplock._cli.status import duration
from skiplock._db.presence import GONE_AFTER, SILENT_AFTER, is_silent


@pytest.fixture(autouse=True)
def quick_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("skiplock._runtime.presence.PRESENCE_INTERVAL", 0.1)


def test_a_worker_reports_itself_and_its_jobs_then_removes_itself(app: App, db: Any) -> None:
    release = threading.Event()

    @app.task(name="wait", queue="mail")
    def wait() -> None:
        release.wait(10)

    @app.task(name="quick", queue="mail")
    def quick() -> None:
        pass

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        worker = Worker(app, concurrency=3, poll_interval=0.05, worker_id="w-test:1")
        running = asyncio.create_task(worker.run())
        await wait_for_async(lambda: app.sync_client.list_workers(), 10.0)
        first = app.sync_client.list_workers()
        quick.enqueue()
        wait.enqueue()
        wait.enqueue()
        await wait_for_async(
            lambda: [w["running"] for w in app.sync_client.list_workers()] == [2], 10.0
        )
        release.set()
        await wait_for_async(
            lambda: [w["finished"] for w in app.sync_client.list_workers()] == [3], 10.0
        )
        busy = app.sync_client.list_workers()
        worker.stop()
        await running
        return first, busy

    first, busy = asyncio.run(asyncio.wait_for(scenario(), 30))
    (row,) = first
    assert row["id"] == "w-test:1"
    assert (row["host"], row["pid"]) == (socket.gethostname(), os.getpid())
    assert (row["queues"], row["concurrency"], row["model"]) == (["mail"], 3, "lease")
    assert row["version"] == skiplock.__version__
    assert (row["running"], row["finished"]) == (0, 0)
    assert not is_silent(row["seen_ago"])
    assert busy[0]["seen_at"] > row["seen_at"] and busy[0]["started_at"] == row["started_at"]
    assert app.sync_client.list_workers() == []  # stopped: its row is gone


def test_held_lock_workers_say_so(app: App, db: Any) -> None:
    @app.task(name="held_one", model="held")
    def held_one() -> None:
        pass

    async def scenario() -> list[dict[str, Any]]:
        worker = Worker(app, poll_interval=0.05)
        running = asyncio.create_task(worker.run())
        await wait_for_async(lambda: app.sync_client.list_workers(), 10.0)
        rows = app.sync_client.list_workers()
        worker.stop()
        await running
        return rows

    rows = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert [r["model"] for r in rows] == ["held"]


def test_rows_of_killed_workers_turn_silent_and_the_leader_forgets_them(app: App, db: Any) -> None:
    workers = f'"{app.schema}".workers'
    for worker_id, ago in (("killed-long-ago", GONE_AFTER + 60), ("killed-lately", 60)):
        db.execute(
            f"INSERT INTO {workers} (id, host, pid, queues, concurrency, model, version, "
            "started_at, seen_at) VALUES (%s, 'gone-host', 1, '{default}', 4, 'lease', '0.0.1', "
            "now() - make_interval(secs => %s), now() - make_interval(secs => %s))",
            (worker_id, ago + 5, ago),
        )
    listed = {w["id"]: w for w in app.sync_client.list_workers()}
    assert set(listed) == {"killed-long-ago", "killed-lately"}
    assert listed["killed-lately"]["seen_ago"] > SILENT_AFTER
    assert 65 <= listed["killed-lately"]["up_seconds"] < 125  # by the server's clock
    assert duration(listed["killed-long-ago"]["up_seconds"]) == "1h 1m"
    assert [duration(s) for s in (0, 59.9, 250, 90_000)] == ["0s", "59s", "4m 10s", "1d 1h"]
    assert is_silent(listed["killed-lately"]["seen_ago"])

    @app.task(name="noop")
    def noop() -> None:
        pass

    async def scenario() -> set[str]:
        worker = Worker(app, poll_interval=0.05, leader_ttl=0.5, worker_id="the-leader")
        running = asyncio.create_task(worker.run())
        await wait_for_async(
            lambda: "killed-long-ago" not in {w["id"] for w in app.sync_client.list_workers()}, 10.0
        )
        ids = {w["id"] for w in app.sync_client.list_workers()}
        worker.stop()
        await running
        return ids

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == {"killed-lately", "the-leader"}
    assert [w["id"] for w in app.sync_client.list_workers()] == ["killed-lately"]
