"""A running held-lock job's row looks pending to every other session (its claim is not
committed): the admin views show it running all the same, by the job marker its transaction
holds (see job_claim), and keep it out of the oldest due job's age."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.stores import SyncStore, sync_store
from skiplock import App

pytestmark = pytest.mark.smoke


def age_the_jobs(db: Any, app: App, hours: dict[int, int]) -> None:
    """Make each job due ``hours[id]`` hours ago (claim order is oldest first)."""
    for job_id, ago in hours.items():
        db.execute(
            f'UPDATE "{app.schema}".jobs SET run_at = now() - make_interval(hours => %s)'
            " WHERE id = %s",
            (ago, job_id),
        )


def shown(app: App, job_id: int) -> str:
    job = app.sync_client.get_job(job_id)
    assert job is not None
    return job.status


def listed(app: App, status: str | None = None) -> dict[int, str]:
    return {job.id: job.status for job in app.sync_client.list_jobs(queue="q", status=status)}


def oldest_hours(app: App) -> int:
    (row,) = app.sync_client.queue_status()
    return round(row["oldest_pending_seconds"] / 3600)


def test_running_held_lock_jobs_are_shown_running(app: App, store: SyncStore, db: Any) -> None:
    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    first, second, third = (e.id for e in t.enqueue_many([{"n": i} for i in range(3)]))
    age_the_jobs(db, app, {first: 3, second: 2, third: 1})
    with (
        psycopg.connect(app.dsn, autocommit=True) as one,
        psycopg.connect(app.dsn, autocommit=True) as two,
    ):
        assert oldest_hours(app) == 3
        claimed = store.job_claim_held(one, ["q"], "w", 30.0)
        # Across several queues the claim is by id (job_claim_by_id): marked all the same.
        by_id = store.job_claim_held(two, ["other", "q"], "w", 30.0)
        assert claimed is not None and by_id is not None
        assert (claimed.id, by_id.id) == (first, second)
        table = db.execute(f'SELECT id, status FROM "{app.schema}".jobs ORDER BY id')
        assert table.fetchall() == [(first, "pending"), (second, "pending"), (third, "pending")]

        assert [shown(app, i) for i in (first, second, third)] == ["running", "running", "pending"]
        assert listed(app) == {first: "running", second: "running", third: "pending"}
        assert listed(app, "running") == {first: "running", second: "running"}
        assert listed(app, "pending") == {third: "pending"}
        assert oldest_hours(app) == 1

        one.rollback()  # the job's transaction ended: its row is pending again, and shown so
        assert [shown(app, i) for i in (first, second, third)] == ["pending", "running", "pending"]
        assert listed(app, "running") == {second: "running"}
        assert oldest_hours(app) == 3
        two.rollback()
    assert listed(app) == {first: "pending", second: "pending", third: "pending"}


@pytest.fixture
def other_app(pg_dsn: str) -> Iterator[App]:
    """A second migrated schema on the same database: its job ids repeat the first's."""
    application = App(pg_dsn, f"held_{secrets.token_hex(5)}")
    application.migrate()
    try:
        yield application
    finally:
        application.sync_client.drop_schema()
        application.close()


def test_a_job_marker_is_its_own_schemas(app: App, other_app: App) -> None:
    for application in (app, other_app):

        @application.task(name="t", queue="q")
        def t(n: int) -> None: ...

        (only,) = t.enqueue_many([{"n": 1}])
        assert only.id == 1
    with psycopg.connect(other_app.dsn, autocommit=True) as held:
        job = sync_store(other_app).job_claim_held(held, ["q"], "w", 30.0)
        assert job is not None and job.id == 1
        assert shown(other_app, 1) == "running"
        assert shown(app, 1) == "pending"
        assert listed(app) == {1: "pending"}
        held.rollback()


def test_a_leased_claim_takes_no_job_marker(app: App, store: SyncStore, db: Any) -> None:
    """Only held-lock claims take job markers: a leased job's row says running itself, and
    once it is finished no marker of its claim could show it running again."""

    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    (enqueued,) = t.enqueue_many([{"n": 1}])
    with psycopg.connect(app.dsn, autocommit=True) as conn, conn.transaction():
        (job,) = store.job_claim(conn, ["q"], 1, "w", 30.0)
        markers = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ).fetchone()
        assert markers == (0,)
        assert job.id == enqueued.id


def test_job_ids_past_2_to_the_31_are_marked_too(app: App, store: SyncStore, db: Any) -> None:
    """The marker's key is the id's low 32 bits as a signed int4: negative from 2^31 on,
    which pg_locks shows unsigned."""

    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    db.execute(f'ALTER TABLE "{app.schema}".jobs ALTER COLUMN id RESTART WITH {2**31 + 5}')
    (first,) = t.enqueue_many([{"n": 1}])
    db.execute(f'ALTER TABLE "{app.schema}".jobs ALTER COLUMN id RESTART WITH {2**32 + 7}')
    (second,) = t.enqueue_many([{"n": 2}])
    with psycopg.connect(app.dsn, autocommit=True) as held:
        job = store.job_claim_held(held, ["q"], "w", 30.0)
        assert job is not None and job.id == first.id == 2**31 + 5
        assert shown(app, first.id) == "running"
        assert shown(app, second.id) == "pending"
        assert listed(app, "running") == {first.id: "running"}
        held.rollback()
    assert shown(app, first.id) == "pending"
