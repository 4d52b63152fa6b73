"""Tables that stay healthy forever: the archive's retention (deleted in bounded batches by the
maintenance leader, or daily partitions dropped whole), status counts that read the live jobs
and a sample of the finished ones instead of the whole table, and doctor's view of the
archive.  Time is pinned with the statements' ``now``, never slept through.  Real server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from helpers.polling import wait_for_async
from helpers.stores import SyncStore
from skiplock import App, JobStatus, Worker
from skiplock._doctor.command import Doctor, Thresholds

DAY = 86400.0


def archive(
    db: psycopg.Connection[Any], schema: str, ages_days: list[float], now: datetime
) -> None:
    """Archived jobs finished ``ages_days`` days before ``now``."""
    db.execute(
        sql.SQL(
            "INSERT INTO {} (id, queue, task, payload, status, priority, run_at, attempts, "
            "max_attempts, created_at, finished_at) "
            "SELECT 1000000 + g.i, 'q', 't', '{{}}', 'done', 0, f, 1, 5, f, f "
            "FROM unnest(%s::float8[]) WITH ORDINALITY AS g(age, i), "
            "LATERAL (SELECT %s::timestamptz - make_interval(secs => g.age * 86400) AS f) AS x"
        ).format(sql.Identifier(schema, "jobs_archive")),
        (ages_days, now),
    )


def archived_ages(db: psycopg.Connection[Any], schema: str, now: datetime) -> list[float]:
    rows = db.execute(
        sql.SQL(
            "SELECT round(extract(epoch FROM %s::timestamptz - finished_at)::numeric / 86400, 1)"
            "::float8 FROM {} ORDER BY 1"
        ).format(sql.Identifier(schema, "jobs_archive")),
        (now,),
    ).fetchall()
    return [r[0] for r in rows]


def test_archive_retention_deletes_in_bounded_batches_oldest_first(
    app: App, store: SyncStore, db: psycopg.Connection[Any]
) -> None:
    now = datetime(2030, 1, 15, 12, tzinfo=UTC)
    archive(db, app.schema, [40.0] * 5 + [35.0] * 5 + [31.0] * 5 + [29.0, 1.0], now)
    # 7 a batch, 2 batches a call: 14 of the 15 past 30 days, the oldest first.
    pruned = store.archive_prune(db, 30 * DAY, batch=7, rounds=2, now=now)
    assert pruned.deleted == 14 and not pruned.partitions.partitioned
    assert archived_ages(db, app.schema, now) == [1.0, 29.0, 31.0]
    assert store.archive_prune(db, 30 * DAY, batch=7, rounds=2, now=now).deleted == 1
    assert archived_ages(db, app.schema, now) == [1.0, 29.0]
    # None keeps them forever; a day later the 29-day-old one is still inside 30 days.
    assert store.archive_prune(db, None, now=now + timedelta(days=5)).deleted == 0
    assert store.archive_prune(db, 30 * DAY, now=now + timedelta(hours=12)).deleted == 0
    assert archived_ages(db, app.schema, now) == [1.0, 29.0]


def test_the_maintenance_leader_prunes_the_archive_by_the_apps_retention(
    pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    app = App(pg_dsn, schema, completion="archive", retention={"archive": 10 * DAY})
    try:
        now = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        archive(db, schema, [12.0, 11.0, 9.0], now)

        @app.task(name="noop")
        def noop() -> None:
            pass

        job = noop.enqueue()

        async def lead() -> None:
            worker = Worker(app, poll_interval=0.1, leader_ttl=1.0)
            task = asyncio.create_task(worker.run())
            try:
                await wait_for_async(lambda: archived_ages(db, schema, now) == [0.0, 9.0], 10)
            finally:
                worker.stop()
                await asyncio.wait_for(task, 30)

        asyncio.run(lead())
        archived = app.get_job(job.id)
        assert archived is not None and archived.status == JobStatus.DONE
    finally:
        app.close()


def partitions(db: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = db.execute(
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass(%s) ORDER BY 1",
        (f'"{schema}".jobs_archive',),
    ).fetchall()
    return [r[0] for r in rows]


def test_a_partitioned_archive_keeps_days_ahead_and_drops_whole_days_past_retention(
    pg_dsn: str, schema: str, store: SyncStore, db: psycopg.Connection[Any]
) -> None:
    app = App(pg_dsn, schema, completion="archive")
    try:

        @app.task(name="noop")
        def noop() -> None:
            pass

        first = noop.enqueue()
        asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
        cutoff = datetime(2030, 1, 10, tzinfo=UTC)
        assert app.sync_client.archive_partition(ahead=2, cutoff=cutoff) == cutoff
        assert partitions(db, schema) == [
            "jobs_archive_default",
            "jobs_archive_legacy",
            "jobs_archive_p20300110",
            "jobs_archive_p20300111",
            "jobs_archive_p20300112",
        ]
        # Archiving goes on into the partitioned table; archived jobs are found by id.
        second = noop.enqueue()
        asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
        for job in (first, second):
            found = app.get_job(job.id)
            assert found is not None and found.status == JobStatus.DONE
        archive(db, schema, [-0.5], cutoff)  # finished 12 h after the cutoff: its own day
        where = db.execute(
            sql.SQL("SELECT tableoid::regclass::text FROM {} WHERE id = 1000001").format(
                sql.Identifier(schema, "jobs_archive")
            )
        ).fetchone()
        assert where is not None and where[0].endswith("jobs_archive_p20300110")
        health = app.sync_client.archive_health()
        assert health["partitioned"] and health["partitions"] == 4 and not health["default_rows"]

        # 31 days after the cutoff, with a 30-day retention: the legacy partition (up to the
        # cutoff) and the first day's are dropped whole; the next days are made.
        later = cutoff + timedelta(days=31, hours=1)
        kept = store.archive_partitions_keep(db, 30 * DAY, ahead=1, now=later)
        assert kept.partitioned
        assert kept.dropped == ["jobs_archive_legacy", "jobs_archive_p20300110"]
        assert kept.created == ["jobs_archive_p20300210", "jobs_archive_p20300211"]
        assert app.get_job(first.id) is None and app.get_job(1000001) is None
        # The plain batch delete stays out of a partitioned archive: no dead rows there.
        assert store.archive_prune(db, 0.0, now=later).deleted == 0
        assert {"jobs_archive_p20300210", "jobs_archive_p20300211"} <= set(partitions(db, schema))
    finally:
        app.close()


def test_doctor_reports_the_archive_its_size_and_jobs_past_its_retention(
    app: App, db: psycopg.Connection[Any]
) -> None:
    now = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    healthy = Doctor(app.dsn, app.schema, Thresholds()).run()
    found = {f.check: f for f in healthy}["archive"]
    assert found.status == "ok" and "kept 30.0d" in found.message
    archive(db, app.schema, [45.0, 2.0], now)
    found = {f.check: f for f in Doctor(app.dsn, app.schema, Thresholds()).run()}["archive"]
    assert found.status == "warn", found
    assert "oldest archived job finished 45.0d ago" in found.message
    assert "skiplock prune" in found.fix
    keep = Thresholds(retention={"archive": None})
    found = {f.check: f for f in Doctor(app.dsn, app.schema, keep).run()}["archive"]
    assert found.status == "ok" and "kept forever" in found.message
