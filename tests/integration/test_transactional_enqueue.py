"""The seed's orders example: a job enqueued in the caller's transaction commits or rolls back
with the business write, and its wake-up NOTIFY is delivered only when that transaction commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from helpers.stores import SyncStore
from skiplock import App, Task

pytestmark = pytest.mark.smoke

QUIET = 0.3  # how long "no notification" is waited for
ARRIVAL = 5.0  # how long an expected notification may take


@pytest.fixture
def orders(app: App, db: Any) -> str:
    table = f'"{app.schema}".orders'
    db.execute(
        f"CREATE TABLE {table} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "customer_id int NOT NULL, total_cents int NOT NULL)"
    )
    return table


@pytest.fixture
def receipt(app: App) -> Task[Any, Any]:
    @app.task(name="send_receipt", queue="receipts")
    def send_receipt(order_id: int) -> None: ...

    return send_receipt


@pytest.fixture
def listener(app: App) -> Iterator[psycopg.Connection[Any]]:
    """A separate session subscribed to the schema's wake-up channel."""
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute(app.queries["channel_listen"])
        # Marked idle, as a waiting worker's listener is: producers notify only then.
        conn.execute(
            app.queries["channel_idle_hold"],
            {"channel": app.queries.channel, "queues": ["receipts", "audit", "later"]},
        )
        yield conn


def notifications(listener: psycopg.Connection[Any], timeout: float) -> list[tuple[str, str]]:
    """(channel, payload) of every notification arriving within ``timeout`` seconds."""
    return [(n.channel, n.payload) for n in listener.notifies(timeout=timeout)]


def first_notifications(listener: psycopg.Connection[Any], expected: int) -> list[tuple[str, str]]:
    """Wait for ``expected`` notifications, then a little longer for any extra ones."""
    got = [(n.channel, n.payload) for n in listener.notifies(timeout=ARRIVAL, stop_after=expected)]
    return got + notifications(listener, QUIET)


def counts(db: Any, app: App, orders: str) -> tuple[int, int]:
    (n_orders,) = db.execute(f"SELECT count(*) FROM {orders}").fetchone()
    (n_jobs,) = db.execute(f'SELECT count(*) FROM "{app.schema}".jobs').fetchone()
    return n_orders, n_jobs


def insert_order(conn: psycopg.Connection[Any], orders: str) -> int:
    row = conn.execute(
        f"INSERT INTO {orders} (customer_id, total_cents) VALUES (42, 1999) RETURNING id"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_rolled_back_order_leaves_no_job_and_sends_no_notification(
    app: App, db: Any, orders: str, receipt: Task[Any, Any], listener: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(app.dsn) as conn:
        order_id = insert_order(conn, orders)
        enqueued = receipt.enqueue(order_id=order_id, conn=conn)
        # Written in the open transaction: the job is there for it, invisible to everyone else.
        assert conn.execute(
            f'SELECT payload FROM "{app.schema}".jobs WHERE id = %s', (enqueued.id,)
        ).fetchone() == ({"order_id": order_id},)
        assert counts(db, app, orders) == (0, 0)
        conn.rollback()
    assert counts(db, app, orders) == (0, 0)
    assert app.get_job(enqueued.id) is None
    assert notifications(listener, QUIET) == []


def test_committed_order_has_exactly_one_job_for_it(
    app: App, store: SyncStore, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    with psycopg.connect(app.dsn) as conn, psycopg.connect(app.dsn, autocommit=True) as worker:
        with conn.transaction():
            order_id = insert_order(conn, orders)
            enqueued = receipt.enqueue(order_id=order_id, conn=conn)
            # A worker cannot claim the job before the order exists for it.
            assert store.job_claim(worker, ["receipts"], 10, "w", 30) == []
        assert counts(db, app, orders) == (1, 1)
        (job,) = store.job_claim(worker, ["receipts"], 10, "w", 30)
    assert job.id == enqueued.id and not enqueued.deduplicated
    assert job.payload == {"order_id": order_id}
    assert (job.task, job.queue) == ("send_receipt", "receipts")


def test_notification_arrives_only_after_commit_and_once_per_queue(
    app: App, orders: str, receipt: Task[Any, Any], listener: psycopg.Connection[Any]
) -> None:
    @app.task(name="audit", queue="audit")
    def audit(order_id: int) -> None: ...

    with psycopg.connect(app.dsn) as conn:
        order_ids = [insert_order(conn, orders) for _ in range(25)]
        # 50 jobs of one queue in one transaction: 25 single enqueues and a batch of 25.
        for order_id in order_ids:
            receipt.enqueue(order_id=order_id, conn=conn)
        receipt.enqueue_many([{"order_id": i} for i in order_ids], conn=conn)
        audit.enqueue(order_id=order_ids[0], conn=conn)
        # A job due later wakes nobody, now or at commit.
        receipt.with_options(queue="later", delay=3600).enqueue(order_id=0, conn=conn)
        assert notifications(listener, QUIET) == [], "notified before the commit"
        conn.commit()

    channel = app.queries.channel
    got = first_notifications(listener, expected=2)
    # One notification per queue that got a due job, its payload the queue name alone.
    assert sorted(got) == [(channel, "audit"), (channel, "receipts")]


def test_listener_of_another_schema_hears_nothing(
    app: App, pg_dsn: str, receipt: Task[Any, Any]
) -> None:
    other = App(pg_dsn, f"{app.schema}_other")
    try:
        assert other.queries.channel != app.queries.channel
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(other.queries["channel_listen"])
            receipt.enqueue(order_id=1)
            assert notifications(conn, QUIET) == []
    finally:
        other.close()


def test_async_enqueue_in_the_callers_transaction(
    app: App, db: Any, orders: str, receipt: Task[Any, Any], listener: psycopg.Connection[Any]
) -> None:
    channel = app.queries.channel

    async def scenario() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(app.dsn) as conn:
            # Rolled back: nothing stays, nobody is woken.
            async with conn.transaction(force_rollback=True):
                cur = await conn.execute(
                    f"INSERT INTO {orders} (customer_id, total_cents) VALUES (7, 100) RETURNING id"
                )
                row = await cur.fetchone()
                assert row is not None
                await receipt.enqueue_async(order_id=row[0], conn=conn)
            assert counts(db, app, orders) == (0, 0)
            assert notifications(listener, QUIET) == []

            # Committed: one order, one job, one notification, and only after the commit.
            async with conn.transaction():
                cur = await conn.execute(
                    f"INSERT INTO {orders} (customer_id, total_cents) VALUES (7, 200) RETURNING id"
                )
                row = await cur.fetchone()
                assert row is not None
                order_id = int(row[0])
                enqueued = await receipt.enqueue_async(order_id=order_id, conn=conn)
                await receipt.enqueue_many_async([{"order_id": order_id}] * 49, conn=conn)
                assert counts(db, app, orders) == (0, 0)
                assert notifications(listener, QUIET) == []
            return order_id, enqueued.id

    order_id, job_id = asyncio.run(scenario())
    assert first_notifications(listener, expected=1) == [(channel, "receipts")]
    assert counts(db, app, orders) == (1, 50)
    job = app.get_job(job_id)
    assert job is not None and job.payload == {"order_id": order_id}


def test_a_conn_skiplock_cannot_write_through_is_refused_and_nothing_is_enqueued(
    app: App, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    """A psycopg2 connection, an async connection given to a sync method (and the reverse),
    or a DSN string where the connection goes: a TypeError that says what to pass."""
    import psycopg2

    old = psycopg2.connect(app.dsn)
    try:
        with pytest.raises(TypeError, match="psycopg2 connection: skiplock runs on psycopg 3"):
            receipt.enqueue(order_id=1, conn=old)
    finally:
        old.close()
    with pytest.raises(TypeError, match=r"must be a psycopg Connection, .* not builtins\.str"):
        receipt.enqueue(order_id=1, conn=app.dsn)  # type: ignore[arg-type]

    async def mismatched() -> None:
        async with await psycopg.AsyncConnection.connect(app.dsn) as aconn:
            with pytest.raises(TypeError, match=r"asynchronous \(psycopg\.AsyncConnection\)"):
                receipt.enqueue(order_id=1, conn=aconn)  # type: ignore[arg-type]
        with (
            psycopg.connect(app.dsn) as conn,
            pytest.raises(TypeError, match=r"synchronous \(psycopg\.Connection\)"),
        ):
            await receipt.enqueue_async(order_id=1, conn=conn)  # type: ignore[arg-type]

    asyncio.run(mismatched())
    assert counts(db, app, orders) == (0, 0)
