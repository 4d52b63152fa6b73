"""Retrying and cancelling many jobs at once (``App.retry_jobs``, ``App.cancel_jobs``), and the
idempotency-key conflict of a retry, on a real server with real concurrent sessions."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for
from helpers.stores import sync_store
from skiplock import App, CancelledJobs, IdempotencyConflict, RetriedJobs, Worker
from skiplock.bulk import JobFilter


def jobs_table(app: App) -> str:
    return f'"{app.schema}".jobs'


def end_as(db: Any, app: App, ids: list[int], status: str, ago: float = 0.0) -> None:
    """Make jobs finished with ``status``, ``ago`` seconds ago, after one spent attempt."""
    db.execute(
        f"UPDATE {jobs_table(app)} SET status = %s, attempts = 1, max_attempts = 1,"
        " finished_at = now() - make_interval(secs => %s) WHERE id = ANY(%s)",
        (status, ago, ids),
    )


def states(db: Any, app: App) -> dict[int, str]:
    return dict(db.execute(f"SELECT id, status FROM {jobs_table(app)}").fetchall())


@pytest.fixture
def tasks(app: App) -> App:
    @app.task(name="mail.send", queue="mail")
    def send(n: int) -> None: ...

    @app.task(name="mail.digest", queue="mail")
    def digest(n: int) -> None: ...

    @app.task(name="video.encode", queue="video")
    def encode(n: int) -> None: ...

    return app


def enqueue(app: App, task: str, count: int, **options: Any) -> list[int]:
    return [e.id for e in app.enqueue_many(task, [{"n": i} for i in range(count)], **options)]


def test_retry_jobs_takes_exactly_the_failed_jobs_that_match(tasks: App, db: Any) -> None:
    app = tasks
    send, digest, encode = (
        enqueue(app, t, 4) for t in ("mail.send", "mail.digest", "video.encode")
    )
    end_as(db, app, send[:2] + digest[:2] + encode[:2], "failed")
    end_as(db, app, send[2:3], "failed", ago=7200)  # failed two hours ago
    end_as(db, app, send[3:4] + digest[2:3], "cancelled")
    end_as(db, app, digest[3:4], "done")
    before = states(db, app)

    assert app.retry_jobs(queue="mail", task="mail.send", finished_within=3600) == RetriedJobs(2)
    changed = {i for i, s in states(db, app).items() if s != before[i]}
    assert changed == set(send[:2])

    assert app.retry_jobs(queue="mail", statuses=["failed", "cancelled"]) == RetriedJobs(5)
    after = states(db, app)
    assert {i for i in send + digest if after[i] == "pending"} == set(send + digest[:3])
    assert after[digest[3]] == "done" and {after[i] for i in encode[:2]} == {"failed"}

    row = db.execute(
        f"SELECT status, attempts, max_attempts, finished_at, run_at <= now() FROM"
        f" {jobs_table(app)} WHERE id = %s",
        (send[2],),
    ).fetchone()
    assert row == ("pending", 1, 2, None, True)  # one more attempt than it spent, due now

    assert app.retry_jobs() == RetriedJobs(2)  # the video ones: no filter takes every queue
    assert app.retry_jobs() == RetriedJobs(0)


def test_a_bulk_change_walks_every_batch(tasks: App, db: Any) -> None:
    app = tasks
    ids = enqueue(app, "mail.send", 25)
    end_as(db, app, ids[:23], "failed")
    jobs = JobFilter(queue="mail")
    assert app.sync_client.retry_jobs(jobs, ["failed"], batch=4) == RetriedJobs(23)
    assert app.sync_client.cancel_jobs(jobs, batch=4) == CancelledJobs(25)
    assert set(states(db, app).values()) == {"cancelled"}


def test_retry_leaves_jobs_whose_idempotency_key_is_taken(tasks: App, db: Any) -> None:
    app = tasks
    send = app.get_task("mail.send")
    held = send.with_options(idempotency_key="receipt:1").enqueue(n=1).id
    end_as(db, app, [held], "failed")
    holder = send.with_options(idempotency_key="receipt:1").enqueue(n=2).id  # unfinished
    older = send.with_options(idempotency_key="receipt:2").enqueue(n=3).id
    end_as(db, app, [older], "failed")  # the key is free again: a new job may take it
    newer = send.with_options(idempotency_key="receipt:2").enqueue(n=4).id
    end_as(db, app, [newer], "failed")
    plain = send.enqueue(n=5).id
    end_as(db, app, [plain], "failed")

    with pytest.raises(IdempotencyConflict) as caught:
        app.retry_job(held)
    assert (caught.value.job_id, caught.value.key, caught.value.holder_id) == (
        held,
        "receipt:1",
        holder,
    )
    assert f"unfinished job {holder} holds its idempotency key 'receipt:1'" in str(caught.value)

    # Of two failed jobs sharing a key only the newest comes back; the held key keeps its job.
    assert app.retry_jobs() == RetriedJobs(retried=2, skipped=2)
    after = states(db, app)
    assert (after[held], after[holder], after[older], after[newer], after[plain]) == (
        "failed",
        "pending",
        "failed",
        "pending",
        "pending",
    )
    with pytest.raises(IdempotencyConflict):
        app.retry_job(older)  # its newer twin holds the key now


def test_a_key_taken_after_the_retry_began_is_skipped_not_an_error(tasks: App, db: Any) -> None:
    """A job enqueued with the key while the retry runs: the unique index refuses the retried
    row, and the statement runs again on a snapshot that sees the new job."""
    app = tasks
    send = app.get_task("mail.send").with_options(idempotency_key="k")
    failed = send.enqueue(n=1).id
    end_as(db, app, [failed], "failed")
    with psycopg.connect(app.dsn) as enqueuer:
        send.enqueue(n=2, conn=enqueuer)  # uncommitted: invisible to the retry's snapshot
        results: list[Any] = []
        retry = threading.Thread(target=lambda: results.append(retry_or_error(app)))
        retry.start()
        wait_until_blocked(db, app)  # the retry waits on the uncommitted key in the index
        enqueuer.commit()
        retry.join(timeout=30)
    assert results == [RetriedJobs(retried=0, skipped=1)]
    assert states(db, app)[failed] == "failed"


def retry_or_error(app: App) -> Any:
    try:
        return app.retry_jobs()
    except Exception as exc:  # reported to the test thread, which compares
        return exc


def wait_until_blocked(db: Any, app: App, timeout: float = 10.0) -> None:

    def waiting() -> int:
        return int(
            db.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND query LIKE %s",
                (f"%{app.schema}%",),
            ).fetchone()[0]
        )

    wait_for(waiting, timeout, "the retry to wait on the uncommitted key", step=0.01)


def test_cancel_jobs_cancels_what_has_not_started_and_asks_running_ones(
    tasks: App, db: Any
) -> None:
    app = tasks
    pending = enqueue(app, "mail.send", 3)
    scheduled = enqueue(app, "mail.send", 2, delay=3600)
    other = enqueue(app, "mail.digest", 2)
    video = enqueue(app, "video.encode", 2)
    store = sync_store(app)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        running = [j.id for j in store.job_claim(conn, ["mail"], 1, "w-1", 30.0)]
    assert running == pending[:1]
    end_as(db, app, video[:1], "done")

    assert app.cancel_jobs(queue="mail", task="mail.send") == CancelledJobs(cancelled=4)
    after = states(db, app)
    assert {i for i, s in after.items() if s == "cancelled"} == set(pending[1:] + scheduled)
    assert after[running[0]] == "running"
    requested = f"SELECT cancel_requested FROM {jobs_table(app)} WHERE id = %s"
    assert db.execute(requested, running).fetchone() == (False,)

    assert app.cancel_jobs(queue="mail", running=True) == CancelledJobs(2, requested=1)
    assert db.execute(requested, running).fetchone() == (True,)
    assert app.cancel_jobs(queue="mail", running=True) == CancelledJobs(0, requested=0)
    after = states(db, app)
    assert {after[i] for i in other} == {"cancelled"}
    assert (after[video[0]], after[video[1]]) == ("done", "pending")


def test_cancel_jobs_does_not_wait_for_or_cancel_a_held_lock_job(tasks: App, db: Any) -> None:
    app = tasks
    first, second = enqueue(app, "mail.send", 2)
    store = sync_store(app)
    with psycopg.connect(app.dsn, autocommit=True) as holder:
        job = store.job_claim_held(holder, ["mail"], "w-held", 30.0)
        assert job is not None and job.id == first  # running, its row locked, still "pending"
        results: list[Any] = []
        cancel = threading.Thread(
            target=lambda: results.append(app.cancel_jobs(queue="mail", running=True))
        )
        cancel.start()
        cancel.join(timeout=10)
        holder.commit()  # lets a cancel that waited on the row go on, so the test can end
        cancel.join()
    assert results == [CancelledJobs(1, requested=0)]
    assert states(db, app) == {first: "running", second: "cancelled"}


def test_retry_jobs_wakes_the_workers_of_each_queue(tasks: App, db: Any) -> None:
    app = tasks
    ids = enqueue(app, "mail.send", 3) + enqueue(app, "video.encode", 2)
    end_as(db, app, ids, "failed")
    with psycopg.connect(app.dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{app.queries.channel}"')
        assert app.retry_jobs() == RetriedJobs(5)
        heard = {n.payload for n in listener.notifies(timeout=2.0, stop_after=2)}
    assert heard == {"mail", "video"}


def test_a_bulk_cancel_racing_a_draining_worker_loses_and_repeats_nothing(
    tasks: App, db: Any
) -> None:
    """Every job ends either cancelled, never having run, or done, having run once."""
    app = tasks
    ran: list[int] = []

    @app.task(name="slowish", queue="race")
    async def slowish(n: int) -> None:
        ran.append(n)
        await asyncio.sleep(0.001)

    total = 3000
    ids = [e.id for e in slowish.enqueue_many([{"n": i} for i in range(total)])]
    number = dict(zip(ids, range(total), strict=True))
    worker = Worker(app, queues=["race"], concurrency=20, burst=True, poll_interval=0.05)
    drained = threading.Thread(target=lambda: asyncio.run(worker.run()))
    drained.start()
    while len(ran) < 300:  # the worker is well into the queue
        time.sleep(0.005)
    result = app.cancel_jobs(queue="race")
    drained.join(timeout=60)
    assert not drained.is_alive()

    after = states(db, app)
    cancelled = {number[i] for i, s in after.items() if s == "cancelled"}
    done = {number[i] for i, s in after.items() if s == "done"}
    assert set(after.values()) <= {"cancelled", "done"}, set(after.values())
    assert len(ran) == len(set(ran)), "a job ran twice"
    assert set(ran) == done, "a cancelled job ran, or a done job did not"
    assert cancelled | done == set(range(total)) and not cancelled & done
    assert result.cancelled == len(cancelled) > 0
