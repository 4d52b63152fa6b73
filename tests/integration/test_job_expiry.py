"""Jobs that expire (``expires``, Celery's option of that name): a job not started by its
expiry is never claimed and ends ``cancelled``, saying so.  Real workers, real server."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from helpers.stores import SyncStore
from skiplock import App, JobContext, JobStatus, Worker, WorkerStats


def burst(app: App) -> WorkerStats:
    return asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_job_not_started_by_its_expiry_never_runs_and_is_cancelled(app: App, model: str) -> None:
    seen: dict[str, Any] = {}

    @app.task(name="notify", model=model, pass_context=True)  # type: ignore[arg-type]
    def notify(ctx: JobContext, to: str) -> None:
        seen[to] = ctx.job.expires_at

    stale = notify.with_options(expires=0.2).enqueue(to="stale")
    fresh = notify.with_options(expires=timedelta(hours=1)).enqueue(to="fresh")
    plain = notify.enqueue(to="plain")
    time.sleep(0.4)
    stats = burst(app)
    assert set(seen) == {"fresh", "plain"} and stats.finished == 2
    job = app.get_job(stale.id)
    assert job is not None and job.status == JobStatus.CANCELLED and job.attempts == 0
    assert job.expires_at is not None and job.finished_at is not None
    assert (job.last_error or "").startswith("expired: not run by 20")
    done = app.get_job(fresh.id)
    assert done is not None and done.status == JobStatus.DONE
    assert seen["fresh"] == done.expires_at and seen["plain"] is None
    assert done.expires_at is not None
    assert timedelta(minutes=59) < done.expires_at - done.created_at <= timedelta(hours=1)
    assert app.get_job(plain.id).expires_at is None  # type: ignore[union-attr]


def test_claims_skip_an_expired_job_before_it_is_cancelled(app: App, store: SyncStore) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    expired = noop.with_options(expires=0.1).enqueue()
    later = noop.enqueue()
    time.sleep(0.2)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        claimed = store.job_claim(conn, ["default"], 10, "w1", 30.0)
        assert [j.id for j in claimed] == [later.id]
        assert app.get_job(expired.id).status == JobStatus.PENDING  # type: ignore[union-attr]
        assert store.job_cancel_expired(conn) == {"default": 1}
        assert store.job_cancel_expired(conn) == {}
    assert app.get_job(expired.id).status == JobStatus.CANCELLED  # type: ignore[union-attr]


def test_cancel_expired_compares_with_a_pinned_time(app: App) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    job = noop.with_options(expires=timedelta(hours=1)).enqueue()
    expires_at = app.get_job(job.id).expires_at  # type: ignore[union-attr]
    assert expires_at is not None
    store = SyncStore(app.queries)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        assert store.job_cancel_expired(conn) == {}
        assert store.job_cancel_expired(conn, now=expires_at) == {}  # not run *by* it: still due
        later = expires_at + timedelta(microseconds=1)
        assert store.job_cancel_expired(conn, now=later) == {"default": 1}
    cancelled = app.get_job(job.id)
    assert cancelled is not None and cancelled.status == JobStatus.CANCELLED
    assert cancelled.finished_at == later


def test_scheduled_and_waiting_jobs_expire_too_and_so_do_their_dependents(app: App) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    at = datetime.now(UTC) + timedelta(seconds=0.2)
    scheduled = noop.with_options(delay=0.05, expires=at).enqueue()
    blocker = noop.with_options(delay=3600).enqueue()
    waiting = noop.with_options(depends_on=[blocker], expires=0.2).enqueue()
    after_it = noop.with_options(depends_on=[waiting]).enqueue()
    time.sleep(0.3)
    burst(app)
    for job_id, status in (
        (scheduled.id, JobStatus.CANCELLED),
        (waiting.id, JobStatus.CANCELLED),
        (after_it.id, JobStatus.CANCELLED),
        (blocker.id, JobStatus.SCHEDULED),
    ):
        assert app.get_job(job_id).status == status  # type: ignore[union-attr]
    last = app.get_job(after_it.id)
    assert last is not None and last.last_error == (
        f"not run: job {waiting.id}, which it depends on, is cancelled"
    )


def test_bad_expiry_is_refused_and_inserts_nothing(app: App, db: Any) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    now = datetime.now(UTC)
    for options, message in (
        ({"expires": 0}, "positive number of seconds"),
        ({"expires": -5}, "positive number of seconds"),
        ({"expires": float("inf")}, "positive number of seconds"),
        ({"expires": float("nan")}, "positive number of seconds"),
        ({"expires": True}, "seconds, a timedelta or a datetime"),
        ({"expires": "60"}, "seconds, a timedelta or a datetime"),
        ({"expires": datetime.now()}, "timezone-aware"),
        ({"expires": 30, "delay": 60}, "longer than the delay"),
        ({"expires": now, "run_at": now + timedelta(minutes=1)}, "after the job is due"),
        ({"expires": now + timedelta(seconds=30), "delay": 60}, "after the job is due"),
        ({"expires": 30, "run_at": now + timedelta(minutes=1)}, "after run_at"),
    ):
        with pytest.raises(ValueError, match=message):
            noop.with_options(**options).enqueue()
    assert db.execute(f'SELECT count(*) FROM "{app.schema}".jobs').fetchone() == (0,)


def test_every_way_of_enqueueing_takes_expires(app: App) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    by_name = app.enqueue("noop", expires=60)
    keyed = noop.with_options(idempotency_key="k", expires=60).enqueue()
    batch = noop.with_options(expires=60).enqueue_many([{}, {}])
    mixed = app.sync_client.enqueue_many(
        [
            app.build_job("noop", {}, app.get_task("noop").settings.options),
            app.build_job("noop", {}, noop.with_options(expires=60).options),
        ]
    )
    for enqueued, expiring in ((by_name, True), (keyed, True), *((b, True) for b in batch),
                               (mixed[0], False), (mixed[1], True)):  # fmt: skip
        job = app.get_job(enqueued.id)
        assert job is not None and (job.expires_at is not None) == expiring, job


def test_async_enqueue_takes_expires(app: App) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    async def enqueue() -> int:
        job = await noop.with_options(expires=timedelta(minutes=5)).enqueue_async()
        await app.close_async()
        return job.id

    job = app.get_job(asyncio.run(enqueue()))
    assert job is not None and job.expires_at is not None
    assert timedelta(minutes=4) < job.expires_at - job.created_at <= timedelta(minutes=5)
