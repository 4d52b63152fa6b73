"""Periodic ticks on the database's clock, and the schedules of the app reconciled with those
recorded when a worker starts leading (issue 46, item 7)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for_async
from helpers.stores import sync_store
from skiplock import App, Worker
from skiplock._db.enqueue import EnqueueOptions
from skiplock._runtime import maintenance

HOURLY: dict[str, Any] = {"every": 3600.0, "misfire_grace": 3600.0, "queue": "cron"}


def ticks(db: Any, app: App) -> dict[str, list[tuple[datetime, int]]]:
    rows = db.execute(
        f'SELECT name, tick, job_id FROM "{app.schema}".periodic_ticks ORDER BY name, tick'
    ).fetchall()
    found: dict[str, list[tuple[datetime, int]]] = {}
    for name, tick, job_id in rows:
        found.setdefault(name, []).append((tick, job_id))
    return found


async def lead(app: App, until: Any) -> None:
    """Run a worker of ``app`` on the cron queue (soon the leader) until ``until`` holds."""
    worker = Worker(app, queues=["cron"], poll_interval=0.1, leader_ttl=1.0)
    task = asyncio.create_task(worker.run())
    try:
        await wait_for_async(until, 10)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


def status(db: Any, app: App, job_id: int) -> tuple[str, str | None]:
    row = db.execute(
        f'SELECT status, last_error FROM "{app.schema}".jobs WHERE id = %s', (job_id,)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_ticks_follow_the_servers_clock_not_the_workers(
    app: App, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose wall clock runs two hours ahead enqueues the tick that has come by the
    server's clock, not one two hours in the future."""

    class Ahead(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(hours=2)

    monkeypatch.setattr(maintenance, "datetime", Ahead, raising=False)

    @app.periodic(every=3600.0, misfire_grace=3600.0, name="hourly")
    def hourly() -> None: ...

    asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    ((tick, _),) = ticks(db, app)["hourly"]
    ((now,),) = db.execute("SELECT now()").fetchall()
    assert now - timedelta(hours=1) < tick <= now


def test_a_new_leader_drops_the_ticks_and_queued_jobs_of_removed_and_changed_schedules(
    pg_dsn: str, schema: str, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    old = App(pg_dsn, schema)
    new = App(pg_dsn, schema)
    try:
        for name in ("gone", "changed", "kept"):
            old.periodic(name=name, **HOURLY)(lambda: None)
        new.periodic(name="kept", **HOURLY)(lambda: None)
        new.task(name="gone", queue="cron")(lambda: None)  # the task stays, its schedule went
        new.periodic(name="changed", **{**HOURLY, "every": 1800.0})(lambda: None)
        old.sync_client.set_paused("cron", True)  # the ticks' jobs stay queued

        asyncio.run(lead(old, lambda: len(ticks(db, old)) == 3))
        before = {name: recorded[-1][1] for name, recorded in ticks(db, old).items()}
        caplog.set_level("INFO", logger="skiplock")

        def changed_again() -> bool:
            """Reconciled (gone's ticks dropped), and the changed schedule ticked anew: by the
            new leader, or before it led (the same instant as the old tick or a later one)."""
            recorded = ticks(db, new)
            return "gone" not in recorded and any(
                job != before["changed"] for _, job in recorded.get("changed", [])
            )

        asyncio.run(lead(new, changed_again))
        after = ticks(db, new)
    finally:
        old.close()
        new.close()
    assert "gone" not in after
    assert status(db, new, before["gone"]) == (
        "cancelled",
        "periodic schedule gone: no longer defined by the app",
    )
    assert status(db, new, before["changed"]) == (
        "cancelled",
        "periodic schedule changed: its definition changed",
    )
    assert [job for _, job in after["changed"]] != [before["changed"]]
    assert [job for _, job in after["kept"]] == [before["kept"]]
    assert status(db, new, before["kept"])[0] == "pending"
    said = [r.getMessage() for r in caplog.records if "periodic schedule" in r.getMessage()]
    assert any("gone" in line and "no longer defined" in line for line in said), said
    assert any("changed" in line and "definition changed" in line for line in said), said


def test_ticks_recorded_since_the_leader_started_are_left_alone(app: App, db: Any) -> None:
    """A tick recorded after this worker started comes from another worker still running (of
    another version, in a rolling deploy): reconciling does not undo it."""

    @app.periodic(name="other", **HOURLY)
    def other() -> None: ...

    store = sync_store(app)
    job = app.build_jobs("other", [{}], EnqueueOptions())
    ((now,),) = db.execute("SELECT now()").fetchall()
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        schedule = app.periodic_tasks["other"].definition("cron")
        store.periodic_enqueue_tick(conn, "other", now, job, schedule)
        assert store.periodic_reconcile(conn, {}, now - timedelta(minutes=1), ["other"]) == []
        assert len(ticks(db, app)["other"]) == 1
        dropped = store.periodic_reconcile(conn, {}, now + timedelta(minutes=1), ["other"])
    assert [(d.name, d.changed, d.ticks, len(d.cancelled)) for d in dropped] == [
        ("other", False, 1, 1)
    ]
    assert "other" not in ticks(db, app)
    assert datetime.now(UTC) > now - timedelta(minutes=5)  # the server's clock is sane


def test_a_leader_leaves_the_schedules_of_tasks_its_app_does_not_have(
    pg_dsn: str, schema: str, db: Any
) -> None:
    """Apps that share a schema may define different periodic tasks: a leader whose app has no
    task of a recorded schedule cannot tell it was removed, so it keeps its ticks and jobs (and
    reconciles its own: its changed schedule's job is cancelled)."""
    theirs, mine_before, mine = (App(pg_dsn, schema) for _ in range(3))
    try:
        theirs.periodic(name="theirs", **HOURLY)(lambda: None)
        mine_before.periodic(name="mine", **HOURLY)(lambda: None)
        mine.periodic(name="mine", **{**HOURLY, "every": 1800.0})(lambda: None)
        theirs.sync_client.set_paused("cron", True)  # the ticks' jobs stay queued

        asyncio.run(lead(theirs, lambda: "theirs" in ticks(db, theirs)))
        asyncio.run(lead(mine_before, lambda: "mine" in ticks(db, mine)))
        (theirs_job,) = [job for _, job in ticks(db, theirs)["theirs"]]
        (mine_job,) = [job for _, job in ticks(db, mine)["mine"]]
        asyncio.run(lead(mine, lambda: status(db, mine, mine_job)[0] == "cancelled"))
        assert [job for _, job in ticks(db, mine)["theirs"]] == [theirs_job]
        assert status(db, mine, theirs_job) == ("pending", None)
    finally:
        for app in (theirs, mine_before, mine):
            app.close()
