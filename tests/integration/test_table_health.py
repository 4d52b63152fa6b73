"""Tables that stay healthy forever: the archive's retention (deleted in bounded batches by the
maintenance leader, or daily partitions dropped whole), status counts that read the live jobs
and a sample of the finished ones instead of the whole table, and doctor's view of the
archive.  Time is pinned with the statements' ``now``, never slept through.  Real server."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from rich.console import Console

from helpers.polling import wait_for_async
from helpers.role_logins import role_logins
from helpers.stores import SyncStore
from skiplock import App, JobStatus, Worker
from skiplock._cli.status import status_table
from skiplock._db.admin_sync import sample_ranges
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


def real_counts(db: psycopg.Connection[Any], schema: str) -> dict[tuple[str, str], int]:
    rows = db.execute(
        sql.SQL("SELECT queue, status, count(*) FROM {} GROUP BY 1, 2").format(
            sql.Identifier(schema, "jobs")
        )
    ).fetchall()
    return {(q, s): n for q, s, n in rows}


def fill(db: psycopg.Connection[Any], schema: str) -> None:
    """20,000 finished jobs in two queues (done, failed, cancelled at 16:3:1) and a few live
    ones of each status."""
    jobs = sql.Identifier(schema, "jobs")
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, status, attempts, locked_by, locked_at, "
            "locked_until, finished_at, run_at) "
            "SELECT 'q' || (g % 2), 't', jsonb_build_object('n', g), s, 1, 'w', now(), now(), "
            "now() - interval '1 hour', now() "
            "FROM generate_series(1, 20000) AS g, "
            "LATERAL (SELECT CASE WHEN g % 20 < 16 THEN 'done' WHEN g % 20 < 19 THEN 'failed' "
            "ELSE 'cancelled' END AS s) AS x"
        ).format(jobs)
    )
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, status, run_at, locked_by, locked_at, "
            "locked_until, attempts) "
            "SELECT 'q' || (g % 2), 't', '{{}}', s, "
            "CASE WHEN s = 'scheduled' THEN now() + interval '1 hour' ELSE now() END, "
            "CASE WHEN s = 'running' THEN 'w' END, CASE WHEN s = 'running' THEN now() END, "
            "CASE WHEN s = 'running' THEN now() + interval '1 hour' END, "
            "CASE WHEN s = 'running' THEN 1 ELSE 0 END "
            "FROM generate_series(1, 7) AS g, unnest(ARRAY['pending', 'scheduled', 'running']) "
            "AS s"
        ).format(jobs)
    )


def rows_read_from_jobs(plan: dict[str, Any]) -> int:
    """Rows the scans of the jobs table returned in an EXPLAIN ANALYZE plan, loops counted."""
    own = plan["Actual Rows"] * plan["Actual Loops"] if plan.get("Relation Name") == "jobs" else 0
    return own + sum(rows_read_from_jobs(p) for p in plan.get("Plans", []))


def test_status_counts_live_jobs_exactly_and_finished_ones_from_a_sample(
    app: App, store: SyncStore, db: psycopg.Connection[Any]
) -> None:
    fill(db, app.schema)
    real = real_counts(db, app.schema)
    # Small enough a table for the whole of it: every count exact.
    rows = {r["queue"]: r for r in store.queue_status(db, sample_pages=100_000)}
    for (queue, status), n in real.items():
        assert rows[queue][status] == n, (queue, status)
        assert rows[queue]["finished_estimated"] is False
    # Sampled: the live counts still exact, the finished ones near the real counts.
    for _ in range(3):
        rows = {r["queue"]: r for r in store.queue_status(db, sample_pages=60)}
        for (queue, status), n in real.items():
            if status in ("pending", "scheduled", "running"):
                assert rows[queue][status] == n, (queue, status)
            else:
                assert abs(rows[queue][status] - n) <= 0.35 * n, (queue, status, rows[queue])
            assert rows[queue]["finished_estimated"] is True
    # `skiplock status` marks the estimates.
    out = Console(width=200, record=True, file=io.StringIO())
    out.print(status_table(list(rows.values()), app.schema))
    text = out.export_text()
    assert "estimated from a sample" in text and f"~{rows['q0']['done']}" in text


def test_status_reads_a_sample_of_the_finished_jobs_not_the_whole_table(
    app: App, db: psycopg.Connection[Any]
) -> None:
    fill(db, app.schema)
    db.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(app.schema, "jobs")))
    statement = app.queries["queue_status"]
    pages = SyncStore(app.queries).job_table_pages(db)
    assert pages > 60
    params = {"silent": 30.0, "schema": app.schema, **sample_ranges(pages, 60)}
    explained = db.execute(
        sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement, params
    ).fetchone()
    assert explained is not None
    read = rows_read_from_jobs(explained[0][0]["Plan"])
    assert read < 20_000 / 3, read


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


def test_partitioning_keeps_the_roles_grants_and_only_worker_and_admin_keep_partitions(
    pg_dsn: str, schema: str, store: SyncStore, db: psycopg.Connection[Any]
) -> None:
    with role_logins(db, pg_dsn, schema) as roles:
        app = App(pg_dsn, schema)
        try:
            cutoff = datetime(2030, 1, 10, tzinfo=UTC)
            app.sync_client.archive_partition(ahead=1, cutoff=cutoff)
        finally:
            app.close()
        archive(db, schema, [1.0], cutoff)  # in the legacy partition
        table = sql.Identifier(schema, "jobs_archive")
        with psycopg.connect(roles.dsn["viewer"], autocommit=True) as viewer:
            # The plain table's grants are the partitioned table's.
            assert viewer.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone() == (
                1,
            )
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                store.archive_partitions_keep(viewer, 0.0, now=cutoff + timedelta(days=5))
        with (
            psycopg.connect(roles.dsn["enqueuer"], autocommit=True) as enqueuer,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            enqueuer.execute(sql.SQL("SELECT payload FROM {}").format(table))
        with psycopg.connect(roles.dsn["worker"], autocommit=True) as worker:
            kept = store.archive_partitions_keep(
                worker, DAY, ahead=0, now=cutoff + timedelta(days=3)
            )
            # Past a day's retention three days on: every partition that ended two days ago.
            assert kept.dropped == [
                "jobs_archive_legacy",
                "jobs_archive_p20300110",
                "jobs_archive_p20300111",
            ]
            assert kept.created == ["jobs_archive_p20300113"]
