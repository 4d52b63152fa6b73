"""What happens to a finished job (keep, delete, archive) and the held-lock model's transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from helpers.stores import SyncStore
from skiplock import App, FixedDelay, JobContext, JobStatus, Worker, WorkerStats

pytestmark = pytest.mark.smoke


def burst(app: App, **options: Any) -> WorkerStats:
    options.setdefault("poll_interval", 0.05)
    return asyncio.run(Worker(app, burst=True, **options).run())


def run_until_settled(app: App, job_id: int, timeout: float = 20.0, **options: Any) -> WorkerStats:
    """Run a (non-burst) worker until the job is neither pending nor running, then stop it.

    Held-lock jobs look 'pending' to other sessions while they run, so this waits for a final
    or scheduled state.
    """

    async def main() -> WorkerStats:
        worker = Worker(app, poll_interval=0.05, **options)
        running = asyncio.create_task(worker.run())
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while True:
                job = await app.get_job_async(job_id)
                assert job is not None
                if job.status not in (JobStatus.PENDING, JobStatus.RUNNING):
                    break
                assert asyncio.get_running_loop().time() < deadline, f"job stuck: {job}"
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            stats = await asyncio.wait_for(running, 15)
            await app.close_async()
        return stats

    return asyncio.run(main())


def burst_or_fail(app: App, timeout: float = 10.0, **options: Any) -> WorkerStats:
    """A burst run that must end by itself; stopped and reported if it does not."""

    async def main() -> tuple[bool, WorkerStats]:
        worker = Worker(app, burst=True, poll_interval=0.05, **options)
        running = asyncio.create_task(worker.run())
        done, _ = await asyncio.wait({running}, timeout=timeout)
        if not done:
            worker.stop()
            await asyncio.wait_for(running, 15)
        return bool(done), worker.stats

    ended, stats = asyncio.run(main())
    assert ended, f"the burst worker did not exit within {timeout}s of draining (stats: {stats})"
    return stats


def job_row(db: Any, schema: str, job_id: int, table: str = "jobs") -> dict[str, Any] | None:
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(
            sql.SQL("SELECT * FROM {} WHERE id = %s").format(sql.Identifier(schema, table)),
            (job_id,),
        )
        row: dict[str, Any] | None = cur.fetchone()
        return row


@pytest.fixture
def orders(db: Any, schema: str) -> Iterator[sql.Composable]:
    """A business table in the test's schema (dropped with it)."""
    table = sql.Identifier(schema, "orders")
    db.execute(
        sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, job_id bigint NOT NULL)").format(table)
    )
    yield table


def order_ids(db: Any, table: sql.Composable) -> list[int]:
    return [r[0] for r in db.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(table))]


# -- completion -----------------------------------------------------------------------------


def test_keep_leaves_the_row_done(app: App, db: Any) -> None:
    @app.task(name="kept")
    def kept(n: int) -> None: ...

    job_id = kept.enqueue(n=1).id
    assert burst(app).done == 1
    row = job_row(db, app.schema, job_id)
    assert row is not None
    assert row["status"] == "done"
    assert row["finished_at"] is not None and row["finished_at"] >= row["created_at"]
    assert row["locked_until"] is None
    assert row["attempts"] == 1
    assert job_row(db, app.schema, job_id, "jobs_archive") is None


def test_delete_removes_the_row(pg_dsn: str, schema: str, db: Any) -> None:
    app = App(pg_dsn, schema, completion="delete")
    try:

        @app.task(name="deleted")
        def deleted(n: int) -> None: ...

        done_id = deleted.enqueue(n=1).id
        waiting_id = deleted.with_options(delay=60).enqueue(n=2).id
        assert burst(app).done == 1
    finally:
        app.close()
    assert job_row(db, schema, done_id) is None
    assert job_row(db, schema, done_id, "jobs_archive") is None
    # Only the finished job went away.
    waiting = job_row(db, schema, waiting_id)
    assert waiting is not None and waiting["status"] == "scheduled"


def test_archive_moves_the_row_to_the_archive_table(pg_dsn: str, schema: str, db: Any) -> None:
    app = App(pg_dsn, schema, completion="archive")
    try:

        @app.task(name="archived", queue="files")
        def archived(path: str, size: int) -> None: ...

        job_id = (
            archived.with_options(priority=3, idempotency_key="k-1")
            .enqueue(path="/a/b", size=42)
            .id
        )
        original = job_row(db, schema, job_id)
        assert original is not None
        assert burst(app).done == 1
    finally:
        app.close()
    assert job_row(db, schema, job_id) is None
    row = job_row(db, schema, job_id, "jobs_archive")
    assert row is not None
    assert row["status"] == "done"
    assert row["payload"] == {"path": "/a/b", "size": 42}
    for column in ("task", "queue", "priority", "idempotency_key", "created_at", "max_attempts"):
        assert row[column] == original[column], column
    assert row["attempts"] == 1
    assert row["finished_at"] is not None
    (archived_rows,) = db.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "jobs_archive"))
    ).fetchone()
    assert archived_rows == 1


# -- held-lock model ------------------------------------------------------------------------


def test_held_task_writes_commit_with_the_job_and_stay_invisible_meanwhile(
    app: App, store: SyncStore, db: Any, orders: sql.Composable
) -> None:
    events: dict[str, asyncio.Event] = {}

    @app.task(name="place_order", model="held", pass_context=True)
    async def place_order(ctx: JobContext, order: int) -> None:
        assert ctx.conn is not None
        await ctx.conn.execute(
            sql.SQL("INSERT INTO {} (id, job_id) VALUES (%s, %s)").format(orders),
            (order, ctx.job.id),
        )
        events["started"].set()
        await events["release"].wait()

    @app.task(name="other", priority=5)
    def other() -> None: ...

    held_id = place_order.enqueue(order=1).id
    other_id = other.enqueue().id
    s = store

    def look_from_outside() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with psycopg.connect(app.dsn, autocommit=True) as conn:
            seen["row"] = job_row(conn, app.schema, held_id)
            seen["orders"] = order_ids(conn, orders)
            seen["claimed"] = [j.id for j in s.job_claim(conn, ["default"], 10, "outsider", 30)]
            with pytest.raises(psycopg.errors.LockNotAvailable):
                conn.execute(
                    sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE NOWAIT").format(
                        sql.Identifier(app.schema, "jobs")
                    ),
                    (held_id,),
                )
        return seen

    async def main() -> tuple[WorkerStats, dict[str, Any]]:
        events["started"] = asyncio.Event()
        events["release"] = asyncio.Event()
        worker = Worker(app, concurrency=1, poll_interval=0.05)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(events["started"].wait(), 15)
        seen = await asyncio.to_thread(look_from_outside)
        events["release"].set()
        worker.stop()
        stats = await asyncio.wait_for(running, 15)
        return stats, seen

    stats, seen = asyncio.run(main())
    # While the held job ran, other sessions saw it untouched and could not take it.
    assert seen["row"]["status"] == "pending"
    assert seen["row"]["attempts"] == 0
    assert seen["row"]["locked_by"] is None
    assert seen["orders"] == []
    assert seen["claimed"] == [other_id]  # the held row was skipped, the next one taken
    # Afterwards the business row and the job's completion are both committed.
    assert (stats.claimed, stats.done) == (1, 1)
    assert order_ids(db, orders) == [1]
    row = job_row(db, app.schema, held_id)
    assert row is not None
    assert (row["status"], row["attempts"]) == ("done", 1)
    assert row["finished_at"] is not None


@pytest.mark.parametrize(("max_attempts", "status"), [(3, "scheduled"), (1, "failed")])
def test_held_task_failure_rolls_back_its_writes_but_records_the_failure(
    app: App, db: Any, orders: sql.Composable, max_attempts: int, status: str
) -> None:
    @app.task(
        name="bad_order",
        model="held",
        pass_context=True,
        max_attempts=max_attempts,
        retry=FixedDelay(30),
    )
    async def bad_order(ctx: JobContext, order: int) -> None:
        assert ctx.conn is not None
        await ctx.conn.execute(
            sql.SQL("INSERT INTO {} (id, job_id) VALUES (%s, %s)").format(orders),
            (order, ctx.job.id),
        )
        raise LookupError(f"order {order} has no customer")

    job_id = bad_order.enqueue(order=9).id
    stats = run_until_settled(app, job_id)
    assert stats.claimed == 1
    assert (stats.retried, stats.failed) == ((1, 0) if status == "scheduled" else (0, 1))
    assert order_ids(db, orders) == []
    row = job_row(db, app.schema, job_id)
    assert row is not None
    assert row["status"] == status
    assert row["attempts"] == 1
    assert row["last_error"].startswith("LookupError: order 9 has no customer")
    assert "Traceback (most recent call last)" in row["last_error"]
    assert (row["finished_at"] is not None) == (status == "failed")


def test_sync_held_task_gets_no_connection_but_its_job_stays_locked(
    app: App, store: SyncStore, db: Any
) -> None:
    seen: dict[str, Any] = {}
    s = store

    @app.task(name="sync_held", model="held", pass_context=True)
    def sync_held(ctx: JobContext) -> None:
        seen["conn"] = ctx.conn
        seen["attempts"] = ctx.job.attempts
        # Look at our own job from a separate session while it runs.
        with psycopg.connect(app.dsn, autocommit=True) as conn:
            seen["row"] = job_row(conn, app.schema, ctx.job.id)
            seen["claimed"] = s.job_claim(conn, ["default"], 10, "outsider", 30)

    job_id = sync_held.enqueue().id
    stats = run_until_settled(app, job_id)
    assert stats.done == 1
    assert "conn" in seen and seen["conn"] is None
    assert seen["attempts"] == 1
    assert seen["row"]["status"] == "pending"
    assert seen["row"]["attempts"] == 0
    assert seen["claimed"] == []
    row = job_row(db, app.schema, job_id)
    assert row is not None and (row["status"], row["attempts"]) == ("done", 1)
    assert app.get_job(job_id).status is JobStatus.DONE  # type: ignore[union-attr]


def test_held_burst_worker_exits_once_the_queue_is_drained(app: App, db: Any) -> None:
    ran: list[int] = []

    @app.task(name="held_quick", model="held")
    async def held_quick(n: int) -> None:
        ran.append(n)

    ids = [e.id for e in held_quick.enqueue_many([{"n": n} for n in range(3)])]
    stats = burst_or_fail(app, timeout=5.0, concurrency=2)
    assert sorted(ran) == [0, 1, 2]
    assert stats.done == 3
    for job_id in ids:
        assert app.get_job(job_id).status is JobStatus.DONE  # type: ignore[union-attr]


def test_idle_held_worker_waits_between_claims(app: App) -> None:
    """With nothing to do, a held-model worker polls like a lease worker instead of spinning."""

    @app.task(name="held_idle", model="held")
    async def held_idle() -> None: ...

    async def main() -> int:
        worker = Worker(app, poll_interval=0.5)
        calls = 0
        claim = worker.store.job_claim_held

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return await claim(*args, **kwargs)

        worker.store.job_claim_held = counted  # type: ignore[method-assign]
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(2.0)
        worker.stop()
        await asyncio.wait_for(running, 15)
        return calls

    calls = asyncio.run(main())
    assert calls >= 1  # it did look for work
    # 2 s at a 0.5 s poll is about 4 claims (plus a few wake-ups); a busy loop makes thousands.
    assert calls <= 40, f"{calls} claim transactions in 2 s of idling"
