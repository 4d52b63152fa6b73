"""Producers notify a queue only while one of its workers is idle (issue 46, item 4): an
enqueue's NOTIFY serializes commits on the server's notification queue, so a producer sends it
only when it can wake someone.  A stranger's advisory lock on the key (issue 41) may only cause
extra notifications, never a missed one or a stall.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from skiplock import App, JobStatus, Worker

QUIET = 0.3
ARRIVAL = 5.0


def heard(conn: psycopg.Connection[Any], timeout: float = QUIET) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=timeout)]


@pytest.fixture
def listening(app: App) -> Iterator[psycopg.Connection[Any]]:
    """A session that LISTENs like a worker's listener, not marked idle."""
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute(app.queries["channel_listen"])
        yield conn


def mark_idle(app: App, conn: psycopg.Connection[Any], queues: list[str]) -> None:
    conn.execute(
        app.queries["channel_idle_hold"], {"channel": app.queries.channel, "queues": queues}
    )


def enqueue_every_way(app: App, queue: str) -> None:
    """Due jobs by each statement of the app's enqueue: single, batch, dependent."""
    app.enqueue("mail", queue=queue)
    app.enqueue_many("mail", [{}, {}], queue=queue)
    app.enqueue("mail", queue=queue, depends_on=[])


@pytest.fixture
def mail(app: App) -> None:
    @app.task(name="mail", queue="mail")
    def mail() -> None: ...


@pytest.mark.usefixtures("mail")
def test_enqueue_notifies_only_while_a_worker_of_the_queue_is_idle(
    app: App, listening: psycopg.Connection[Any]
) -> None:
    enqueue_every_way(app, "mail")
    assert heard(listening) == [], "no worker is idle: a notification only costs the commit"

    with psycopg.connect(app.dsn, autocommit=True) as idle:
        mark_idle(app, idle, ["mail"])
        enqueue_every_way(app, "mail")
        got = [n.payload for n in listening.notifies(timeout=ARRIVAL, stop_after=3)]
        assert got + heard(listening) == ["mail"] * 3
        enqueue_every_way(app, "other")  # idle on mail only
        assert heard(listening) == []
        idle.execute(
            app.queries["channel_idle_release"],
            {"channel": app.queries.channel, "queues": ["mail"], "held": True},
        )
        enqueue_every_way(app, "mail")
        assert heard(listening) == []
    # Marked again, then the session ends: the server forgets the mark with it.
    with psycopg.connect(app.dsn, autocommit=True) as idle:
        mark_idle(app, idle, ["mail", "other"])
        pid = idle.info.backend_pid
    gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
    deadline = time.monotonic() + ARRIVAL
    while listening.execute(gone, [pid]).fetchone() != (0,) and time.monotonic() < deadline:
        time.sleep(0.01)  # the backend exits after the client closed
    enqueue_every_way(app, "mail")
    assert heard(listening) == []


@pytest.fixture
def stranger(pg_dsn: str, db: psycopg.Connection[Any]) -> Iterator[str]:
    """A LOGIN role with no privilege at all: advisory locks need none (issue 41)."""
    name = f"stranger_{secrets.token_hex(4)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        yield conninfo.make_conninfo(pg_dsn, user=name)
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.mark.usefixtures("mail")
@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_a_strangers_lock_on_the_idle_key_only_adds_notifications(
    app: App, stranger: str, listening: psycopg.Connection[Any], mode: str
) -> None:
    lock = "pg_advisory_lock" if mode == "exclusive" else "pg_advisory_lock_shared"
    with psycopg.connect(stranger, autocommit=True) as conn:
        conn.execute(
            f"SELECT {lock}(hashtext('skiplock_idle/' || %s), hashtext('mail'))",
            [app.queries.channel],
        )
        started = time.monotonic()
        enqueue_every_way(app, "mail")
        assert time.monotonic() - started < 2.0, "a producer waited for the stranger"
        got = [n.payload for n in listening.notifies(timeout=ARRIVAL, stop_after=3)]
        assert got + heard(listening) == ["mail"] * 3

        # A worker's listener cannot mark itself idle behind an exclusive holder: it gives up
        # after its lock timeout instead of waiting, and the worker keeps running jobs.
        async def scenario() -> tuple[float, float, bool]:
            worker = Worker(app, queues=["mail"], poll_interval=5.0)
            running = asyncio.create_task(worker.run())
            while worker.listener is None or not worker.listener.listening.is_set():
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)
            listener = worker.listener
            assert listener is not None
            failed = listener.idle_failed
            latencies = []
            for _ in range(3):
                enqueued = time.monotonic()
                job_id = (await app.enqueue_async("mail")).id
                while time.monotonic() - enqueued < 10:
                    job = await app.get_job_async(job_id)
                    if job is not None and job.status == JobStatus.DONE:
                        break
                    await asyncio.sleep(0.005)
                latencies.append(time.monotonic() - enqueued)
                await asyncio.sleep(0.3)
            # The stranger lets go: the listener marks the worker idle within a retry.
            conn.execute("SELECT pg_advisory_unlock_all()")
            await asyncio.sleep(1.0)
            held = listener.idle_held
            enqueued = time.monotonic()
            job_id = (await app.enqueue_async("mail")).id
            while time.monotonic() - enqueued < 10:
                job = await app.get_job_async(job_id)
                if job is not None and job.status == JobStatus.DONE:
                    break
                await asyncio.sleep(0.005)
            after = time.monotonic() - enqueued
            worker.stop()
            await running
            return statistics.median(latencies), after, failed and held

        median, after, failed_then_held = asyncio.run(scenario())
        if mode == "exclusive":
            assert failed_then_held
        assert median < 1.0, median  # notified (the poll is 5 s)
        assert after < 1.0, after


@pytest.mark.usefixtures("mail")
def test_a_busy_worker_is_not_notified_and_still_runs_what_comes(
    app: App, listening: psycopg.Connection[Any]
) -> None:
    @app.task(name="nap", queue="mail")
    async def nap(seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def scenario() -> tuple[list[str], list[str], list[str], float]:
        worker = Worker(app, queues=["mail"], concurrency=1, poll_interval=5.0)
        running = asyncio.create_task(worker.run())
        while worker.listener is None or not worker.listener.listening.is_set():
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        heard(listening, 0.05)
        first = (await app.enqueue_async("nap", {"seconds": 1.0})).id
        await asyncio.sleep(0.3)  # claimed: its only slot is busy
        first_woke = await asyncio.to_thread(heard, listening, 0.05)
        busy = [(await app.enqueue_async("mail")).id for _ in range(5)]
        await asyncio.sleep(0.1)
        while_busy = await asyncio.to_thread(heard, listening)
        # Each runs as the slot frees, not at the 5 s poll.
        started = time.monotonic()
        while time.monotonic() - started < 10:
            jobs = [await app.get_job_async(i) for i in [first, *busy]]
            if all(j is not None and j.status == JobStatus.DONE for j in jobs):
                break
            await asyncio.sleep(0.01)
        drained = time.monotonic() - started
        await asyncio.sleep(0.3)  # idle again
        await app.enqueue_async("mail")
        when_idle = await asyncio.to_thread(
            lambda: [n.payload for n in listening.notifies(timeout=ARRIVAL, stop_after=1)]
        )
        worker.stop()
        await running
        return first_woke, while_busy, when_idle, drained

    first_woke, while_busy, when_idle, drained = asyncio.run(scenario())
    assert first_woke == ["mail"]  # the worker was idle
    assert while_busy == [], while_busy
    assert drained < 3.0, drained
    assert when_idle == ["mail"]


async def trickle(app: App, concurrency: int, jobs: int) -> list[float]:
    """Enqueue ``jobs`` jobs of "mail" one at a time into an idle worker (its poll 3 s away):
    the seconds from each enqueue until the job is done."""
    worker = Worker(app, queues=["mail"], concurrency=concurrency, poll_interval=3.0)
    running = asyncio.create_task(worker.run())
    while worker.listener is None or not worker.listener.listening.is_set():
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    latencies = []
    for _ in range(jobs):
        enqueued = time.monotonic()
        job_id = (await app.enqueue_async("mail")).id
        while time.monotonic() - enqueued < 5:
            job = await app.get_job_async(job_id)
            if job is not None and job.status == JobStatus.DONE:
                break
            await asyncio.sleep(0.002)
        latencies.append(time.monotonic() - enqueued)
        await asyncio.sleep(0.1)
    worker.stop()
    await running
    return latencies


@pytest.mark.usefixtures("mail")
def test_a_trickle_into_an_idle_worker_starts_at_notification_speed(app: App) -> None:
    """One job at a time into an idle worker: each is notified, so it starts within the
    wake-up latency (a few ms), not at the poll; a concurrency-1 worker marks itself busy and
    idle again around each job."""
    for concurrency in (1, 8):
        latencies = asyncio.run(trickle(app, concurrency, 15))
        assert statistics.median(latencies) < 0.1, (concurrency, latencies)
        assert max(latencies) < 1.0, (concurrency, latencies)


@pytest.mark.usefixtures("mail")
@pytest.mark.parametrize("limit", ["queue", "key"])
def test_an_idle_worker_under_limits_is_still_woken_by_notification(app: App, limit: str) -> None:
    """A claim that came up short under a limit (a concurrency limit of the queue, or limits
    of some key anywhere) may not mean the queue is empty, but an idle worker there must still
    be marked idle: else no producer notifies it and every job waits for the poll."""
    if limit == "queue":
        app.sync_client.set_concurrency_limit("mail", 4)
    else:
        app.sync_client.set_key_limit("some-tenant", concurrency=2)
    try:
        latencies = asyncio.run(trickle(app, 4, 8))
    finally:
        app.sync_client.set_concurrency_limit("mail", None)
        app.sync_client.set_key_limit("some-tenant")
    assert statistics.median(latencies) < 0.5, latencies


def test_releasing_the_mark_drops_only_its_own_keys(app: App) -> None:
    """Behind a transaction-mode pooler the listener's session may be another client's: the
    release must not drop that client's advisory locks (pg_advisory_unlock_all would)."""
    mine = "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(4242, 4242)")  # the other client's
        mark_idle(app, conn, ["mail", "other"])
        assert conn.execute(mine).fetchone() == (3,)
        release = app.queries["channel_idle_release"]
        channel = app.queries.channel
        conn.execute(release, {"channel": channel, "queues": ["mail", "other"], "held": True})
        assert conn.execute(mine).fetchone() == (1,)
        # After a mark that gave up part way: only the keys it holds, without a warning.
        mark_idle(app, conn, ["mail"])
        conn.execute(release, {"channel": channel, "queues": ["mail", "other"], "held": False})
        assert conn.execute(mine).fetchone() == (1,)
        assert conn.execute("SELECT pg_advisory_unlock(4242, 4242)").fetchone() == (True,)
