"""Jobs that run after others (``depends_on``): they wait until every job they depend on is
done, are cancelled when one fails or is cancelled, and enqueue like any job (transactionally,
with idempotency keys, by id or by what an enqueue returned).  Real workers, real server."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.stores import SyncStore
from skiplock import App, JobStatus, Worker, WorkerStats
from skiplock._db.enqueue import EnqueueOptions


def burst(app: App) -> WorkerStats:
    return asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))


def status(app: App, job_id: int) -> JobStatus:
    job = app.get_job(job_id)
    assert job is not None
    return job.status


def dependency_rows(app: App, db: Any) -> list[tuple[int, int]]:
    table = f'"{app.schema}".job_dependencies'
    return db.execute(f"SELECT job_id, depends_on FROM {table} ORDER BY 1, 2").fetchall()


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_job_runs_only_after_every_job_it_depends_on_is_done(
    app: App, db: Any, model: str
) -> None:
    ran: list[str] = []

    @app.task(name="step", model=model)  # type: ignore[arg-type]
    def step(name: str) -> None:
        ran.append(name)

    # Enqueued first and better placed in claim order, yet it waits for both.
    report = step.with_options(priority=-10, depends_on=[]).enqueue(name="placeholder")
    fetch_a, fetch_b = step.enqueue(name="a"), step.enqueue(name="b")
    merge = step.with_options(priority=-10, depends_on=[fetch_a, fetch_b.id]).enqueue(name="merge")
    publish = step.with_options(depends_on=[merge]).enqueue(name="publish")
    assert status(app, report.id) == JobStatus.PENDING  # an empty list depends on nothing
    assert (status(app, merge.id), status(app, publish.id)) == (JobStatus.WAITING,) * 2
    assert app.sync_client.waits_for(merge.id) == [(fetch_a.id, "pending"), (fetch_b.id, "pending")]
    (row,) = app.sync_client.queue_status()
    assert (row["waiting"], row["pending"]) == (2, 3)

    stats = burst(app)
    assert stats.finished == 5
    assert sorted(ran[:3]) == ["a", "b", "placeholder"]
    assert ran[3:] == ["merge", "publish"]
    assert status(app, publish.id) == JobStatus.DONE
    assert dependency_rows(app, db) == []  # forgotten once released


def test_a_job_whose_dependencies_are_done_already_is_due_at_once(app: App) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    first = noop.enqueue()
    burst(app)
    later = noop.with_options(depends_on=[first]).enqueue()
    scheduled = noop.with_options(depends_on=[first], delay=3600).enqueue()
    assert status(app, later.id) == JobStatus.PENDING
    assert status(app, scheduled.id) == JobStatus.SCHEDULED


def test_a_failed_dependency_cancels_its_dependents_down_the_chain(app: App, db: Any) -> None:
    ran: list[str] = []

    @app.task(name="extract", max_attempts=1)
    def extract() -> None:
        raise ValueError("source gone")

    @app.task(name="load")
    def load(name: str) -> None:
        ran.append(name)

    failing = extract.enqueue()
    transform = load.with_options(depends_on=[failing]).enqueue(name="transform")
    report = load.with_options(depends_on=[transform]).enqueue(name="report")
    unrelated = load.enqueue(name="unrelated")
    stats = burst(app)
    assert ran == ["unrelated"]
    assert (stats.failed, stats.finished) == (1, 2)
    assert [status(app, j.id) for j in (failing, transform, report, unrelated)] == [
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        JobStatus.CANCELLED,
        JobStatus.DONE,
    ]
    for job, cause, state in ((transform, failing, "failed"), (report, transform, "cancelled")):
        got = app.get_job(job.id)
        assert got is not None and got.finished_at is not None
        assert got.last_error == f"not run: job {cause.id}, which it depends on, is {state}"
    assert dependency_rows(app, db) == []


def test_a_cancelled_dependency_cancels_its_dependent_which_an_admin_may_retry(
    app: App,
) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    first = noop.with_options(delay=3600).enqueue()
    second = noop.with_options(depends_on=[first]).enqueue()
    assert app.sync_client.cancel_or_request(first.id) == "cancelled"
    burst(app)
    assert status(app, second.id) == JobStatus.CANCELLED
    # An admin retry runs the dependent now, whatever became of what it waited for.
    assert app.sync_client.retry_job(second.id)
    burst(app)
    assert status(app, second.id) == JobStatus.DONE


def test_depends_on_unknown_or_bad_ids_is_refused_and_inserts_nothing(app: App, db: Any) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    known = noop.enqueue()
    with pytest.raises(ValueError, match=r"no job was ever enqueued with id 999999999"):
        noop.with_options(depends_on=[known, 999_999_999]).enqueue()
    for bad in ([0], [-3], ["12"], [True], [1.5], 7):
        with pytest.raises(ValueError, match="depends_on"):
            noop.with_options(depends_on=bad).enqueue()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 1000"):
        noop.with_options(depends_on=list(range(1, 1002))).enqueue()
    jobs = f'"{app.schema}".jobs'
    assert db.execute(f"SELECT count(*) FROM {jobs}").fetchone() == (1,)
    assert dependency_rows(app, db) == []


def test_dependent_jobs_enqueue_in_the_callers_transaction(app: App, pg_dsn: str, db: Any) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    with psycopg.connect(pg_dsn) as conn:
        first = noop.enqueue(conn=conn)
        noop.with_options(depends_on=[first]).enqueue(conn=conn)
        conn.rollback()
    jobs = f'"{app.schema}".jobs'
    assert db.execute(f"SELECT count(*) FROM {jobs}").fetchone() == (0,)
    assert dependency_rows(app, db) == []
    with psycopg.connect(pg_dsn) as conn:
        first = noop.enqueue(conn=conn)
        second = noop.with_options(depends_on=[first]).enqueue(conn=conn)  # sees the new job
    assert status(app, second.id) == JobStatus.WAITING
    assert dependency_rows(app, db) == [(second.id, first.id)]


def test_a_waiting_job_holds_its_idempotency_key(app: App) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    first = noop.with_options(delay=3600).enqueue()
    waiting = noop.with_options(depends_on=[first], idempotency_key="digest").enqueue()
    again = noop.with_options(depends_on=[first], idempotency_key="digest").enqueue()
    plain = noop.with_options(idempotency_key="digest").enqueue()
    assert not waiting.deduplicated
    assert again.id == plain.id == waiting.id and again.deduplicated and plain.deduplicated
    many = noop.with_options(depends_on=[first], idempotency_key="other").enqueue_many([{}] * 3)
    assert len({e.id for e in many}) == 1 and [e.deduplicated for e in many] == [
        False,
        True,
        True,
    ]


def test_mixed_batches_and_every_way_of_enqueueing_take_depends_on(app: App) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    first = noop.enqueue()
    rows = [
        app.build_job("noop", {}, EnqueueOptions(depends_on=[first])),
        app.build_job("noop", {}, EnqueueOptions()),
    ]
    waiting, free = app.sync_client.enqueue_many(rows)
    by_name = app.enqueue("noop", depends_on=[first.id])
    many = noop.with_options(depends_on=(first,)).enqueue_many([{}, {}])
    assert status(app, free.id) == JobStatus.PENDING
    for job in (waiting, by_name, *many):
        assert status(app, job.id) == JobStatus.WAITING
    burst(app)
    for job in (waiting, by_name, *many):
        assert status(app, job.id) == JobStatus.DONE


@pytest.fixture
def deleting_app(pg_dsn: str) -> Iterator[App]:
    application = App(pg_dsn, f"t_{secrets.token_hex(5)}", completion="delete")
    application.migrate()
    yield application
    application.sync_client.drop_schema()
    application.close()


def test_a_dependency_deleted_when_done_counts_as_done(deleting_app: App) -> None:
    app = deleting_app

    @app.task(name="noop")
    def noop() -> None:
        pass

    first = noop.enqueue()
    second = noop.with_options(depends_on=[first]).enqueue()
    burst(app)
    assert app.get_job(first.id) is None and app.get_job(second.id) is None  # both ran


def test_release_reads_waiting_jobs_a_batch_at_a_time_from_where_it_stopped(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    first = noop.with_options(delay=3600).enqueue()
    waiting = [noop.with_options(depends_on=[first]).enqueue().id for _ in range(5)]
    db.execute(f"UPDATE \"{app.schema}\".jobs SET status = 'done' WHERE id = %s", (first.id,))
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        one = store.job_release_waiting(conn, after_id=0, limit=2)
        two = store.job_release_waiting(conn, after_id=one.last_id or 0, limit=2)
        three = store.job_release_waiting(conn, after_id=two.last_id or 0, limit=2)
        four = store.job_release_waiting(conn, after_id=three.last_id or 0, limit=2)
    assert [(r.read, r.last_id) for r in (one, two, three, four)] == [
        (2, waiting[1]),
        (2, waiting[3]),
        (1, waiting[4]),
        (0, None),
    ]
    assert [r.released for r in (one, two, three, four)] == [{"default": 2}] * 2 + [
        {"default": 1},
        {},
    ]
    assert {status(app, job_id) for job_id in waiting} == {JobStatus.PENDING}


def test_jobs_no_longer_waiting_lose_their_dependency_rows_at_the_prune(
    app: App, store: SyncStore, db: Any
) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    first = noop.with_options(delay=3600).enqueue()
    second = noop.with_options(depends_on=[first]).enqueue()
    third = noop.with_options(depends_on=[first]).enqueue()
    assert app.sync_client.cancel_or_request(second.id) == "cancelled"  # an admin's cancel
    assert len(dependency_rows(app, db)) == 2
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        store.job_dependencies_prune(conn)
    assert dependency_rows(app, db) == [(third.id, first.id)]


def test_async_enqueue_takes_depends_on_and_refuses_unknown_ids(app: App) -> None:
    @app.task(name="noop")
    def noop() -> None:
        pass

    async def enqueue() -> tuple[int, int, int]:
        first = await noop.enqueue_async()
        second = await app.enqueue_async("noop", depends_on=[first])
        keyed = await noop.with_options(depends_on=[second], idempotency_key="k").enqueue_async()
        with pytest.raises(ValueError, match="no job was ever enqueued with id 999999999"):
            await noop.with_options(depends_on=[999_999_999]).enqueue_async()
        await app.close_async()
        return first.id, second.id, keyed.id

    first, second, keyed = asyncio.run(enqueue())
    assert [status(app, j) for j in (first, second, keyed)] == [
        JobStatus.PENDING,
        JobStatus.WAITING,
        JobStatus.WAITING,
    ]
    assert app.sync_client.waits_for(keyed) == [(second, "waiting")]


def test_a_leader_with_jobs_waiting_releases_them_between_its_rounds(app: App) -> None:
    """Rounds come every poll interval (3 s here); once one has found jobs waiting, the leader
    looks for releasable ones every 0.1 s, so a chain does not move a step per round."""
    ran: list[tuple[int, float]] = []

    @app.task(name="step")
    async def step(n: int) -> None:
        ran.append((n, time.monotonic()))

    async def chain() -> None:
        worker = Worker(app, poll_interval=3)
        running = asyncio.create_task(worker.run())
        try:
            first = await step.enqueue_async(n=1)
            second = await step.with_options(depends_on=[first]).enqueue_async(n=2)
            await step.with_options(depends_on=[second]).enqueue_async(n=3)
            async with asyncio.timeout(20):
                while len(ran) < 3:
                    await asyncio.sleep(0.02)
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)
            await app.close_async()

    asyncio.run(chain())
    (one, _), (two, released), (three, last) = ran
    assert (one, two, three) == (1, 2, 3)
    assert last - released < 2.0  # not the next round, 3 s later


def test_a_job_that_starts_waiting_after_a_round_found_none_is_released_between_rounds(
    app: App,
) -> None:
    """A leader's round that found no job waiting does not leave the next one to wait for the
    round after: a job made to wait just after it (its dependency still running) starts soon
    after its dependency is done, not a poll interval (3 s here) later."""
    ran: dict[str, float] = {}
    blocker_may_end = asyncio.Event()

    @app.task(name="blocker")
    async def blocker() -> None:
        await blocker_may_end.wait()
        ran["blocker"] = time.monotonic()

    @app.task(name="after")
    async def after() -> None:
        ran["after"] = time.monotonic()

    async def scenario() -> None:
        worker = Worker(app, poll_interval=3)
        running = asyncio.create_task(worker.run())
        try:
            first = await blocker.enqueue_async()
            async with asyncio.timeout(10):
                while app.get_job(first.id).status != JobStatus.RUNNING:  # type: ignore[union-attr]
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)  # the leader's first round has read no job waiting
            await after.with_options(depends_on=[first]).enqueue_async()
            blocker_may_end.set()
            async with asyncio.timeout(20):
                while "after" not in ran:
                    await asyncio.sleep(0.02)
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)
            await app.close_async()

    asyncio.run(scenario())
    assert ran["after"] - ran["blocker"] < 1.5  # not the next round's release
