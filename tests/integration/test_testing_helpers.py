"""skiplock.testing, the helpers users call in their own tests, on a real server."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from skiplock import App, ExponentialBackoff, Retry
from skiplock.testing import (
    assert_enqueued,
    assert_not_enqueued,
    drain,
    drain_async,
    enqueued,
)


@pytest.fixture
def shop(app: App) -> dict[str, Any]:
    ran: list[tuple[str, Any]] = []

    @app.task(name="receipt", queue="mail")
    def receipt(order_id: int, customer: dict[str, Any]) -> None:
        ran.append(("receipt", order_id))

    @app.task(name="restock", queue="stock")
    async def restock(sku: str) -> None:
        ran.append(("restock", sku))

    @app.task(name="charge", queue="billing", max_attempts=3,
              retry=ExponentialBackoff(base=3600, cap=3600))  # fmt: skip
    def charge(order_id: int) -> None:
        ran.append(("charge", order_id))
        raise ValueError("card declined")

    @app.task(name="poll", queue="stock")
    def poll() -> None:
        ran.append(("poll", None))
        raise Retry(delay=3600)

    return {"app": app, "ran": ran, "receipt": receipt, "restock": restock, "charge": charge,
            "poll": poll}  # fmt: skip


def test_assert_enqueued_matches_payload_fields_queue_and_count(shop: dict[str, Any]) -> None:
    receipt = shop["receipt"]
    for order_id in (1, 2, 2):
        receipt.enqueue(order_id=order_id, customer={"id": 42, "tier": "gold"})
    receipt.with_options(queue="mail_bulk").enqueue(order_id=3, customer={"id": 7})

    job = assert_enqueued(receipt, payload={"order_id": 1})
    assert job.payload == {"order_id": 1, "customer": {"id": 42, "tier": "gold"}}
    assert (
        assert_enqueued(receipt, payload={"customer": {"tier": "gold"}}, count=3).payload[
            "order_id"
        ]
        == 2
    )  # nested objects match by their own fields; the newest is returned
    assert assert_enqueued(receipt, payload={"order_id": 2}, count=2).id > job.id
    assert_enqueued(receipt, payload={"order_id": 3}, queue="mail_bulk")
    assert len(enqueued(receipt)) == 4

    with pytest.raises(AssertionError) as missing:
        assert_enqueued(receipt, payload={"order_id": 9})
    message = str(missing.value)
    assert "expected a job of task 'receipt' with a payload containing {'order_id': 9}" in message
    assert "found 0" in message and "'order_id': 3" in message  # what was enqueued instead
    with pytest.raises(AssertionError, match=r"expected 1 job\(s\) .* found 2"):
        assert_enqueued(receipt, payload={"order_id": 2}, count=1)
    with pytest.raises(AssertionError, match="found 0"):
        assert_enqueued(receipt, payload={"order_id": 3}, queue="mail")
    with pytest.raises(AssertionError, match="no job of that task is waiting"):
        assert_enqueued(shop["restock"])

    assert_not_enqueued(receipt, payload={"order_id": 9})
    assert_not_enqueued(shop["restock"])
    with pytest.raises(AssertionError, match=r"expected no job of task 'receipt'.*found 2"):
        assert_not_enqueued(receipt, payload={"order_id": 2})


def test_with_conn_they_see_the_callers_uncommitted_jobs(shop: dict[str, Any], pg_dsn: str) -> None:
    receipt = shop["receipt"]
    with psycopg.connect(pg_dsn) as conn:  # a transaction a test would roll back
        receipt.enqueue(order_id=5, customer={}, conn=conn)
        assert_enqueued(receipt, payload={"order_id": 5}, conn=conn)
        assert_not_enqueued(receipt, payload={"order_id": 5})  # not committed: not for others
        conn.rollback()
        assert_not_enqueued(receipt, payload={"order_id": 5}, conn=conn)


def test_drain_runs_what_is_due_and_finished_jobs_are_no_longer_enqueued(
    shop: dict[str, Any], db: Any
) -> None:
    app, ran = shop["app"], shop["ran"]
    shop["receipt"].enqueue(order_id=1, customer={})
    shop["restock"].enqueue(sku="A-1")
    later = shop["restock"].with_options(delay=3600).enqueue(sku="B-2")
    due = shop["restock"].with_options(delay=3600).enqueue(sku="C-3")
    db.execute(
        f"UPDATE \"{app.schema}\".jobs SET run_at = now() - interval '1 second' WHERE id = %s",
        (due.id,),
    )  # scheduled, and its time has come: no leader has promoted it yet

    stats = drain(app)
    assert (stats.claimed, stats.done) == (3, 3)
    assert sorted(ran) == [("receipt", 1), ("restock", "A-1"), ("restock", "C-3")]
    assert_not_enqueued(shop["receipt"])
    assert [j.id for j in enqueued(shop["restock"])] == [later.id]

    stats = drain(app, with_scheduled=True)
    assert (stats.claimed, stats.done) == (1, 1) and ("restock", "B-2") in ran


def test_drain_with_scheduled_runs_retries_until_the_job_fails_for_good(
    shop: dict[str, Any], db: Any
) -> None:
    app, ran = shop["app"], shop["ran"]
    job = shop["charge"].enqueue(order_id=7)

    once = drain(app, queues=["billing"])
    assert (once.claimed, once.retried) == (1, 1)  # then it waits an hour
    stats = drain(app, queues=["billing"], with_scheduled=True)
    assert (stats.claimed, stats.retried, stats.failed) == (2, 1, 1)
    assert ran == [("charge", 7)] * 3
    status, attempts = db.execute(
        f'SELECT status, attempts FROM "{app.schema}".jobs WHERE id = %s', (job.id,)
    ).fetchone()
    assert (status, attempts) == ("failed", 3)


def test_drain_stops_a_task_that_snoozes_forever(shop: dict[str, Any]) -> None:
    shop["poll"].enqueue()
    with pytest.raises(RuntimeError, match=r"after 4 rounds.*snooze or retry forever"):
        drain(shop["app"], queues=["stock"], with_scheduled=True, max_rounds=4)
    assert shop["ran"] == [("poll", None)] * 4


def test_drain_async_from_a_running_event_loop(shop: dict[str, Any]) -> None:
    async def scenario() -> Any:
        await shop["restock"].enqueue_async(sku="Z-9")
        return await drain_async(shop["app"])

    stats = asyncio.run(scenario())
    assert stats.done == 1 and shop["ran"] == [("restock", "Z-9")]
