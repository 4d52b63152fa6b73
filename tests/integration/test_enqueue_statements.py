"""The two enqueue statements: ``job_insert_one`` (one job, or a batch sharing an idempotency
key) and ``job_insert_batch`` (many jobs without a key, their payloads in one JSON array).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from skiplock import App, Enqueued, InvalidPayload, Task

QUIET = 0.3
ARRIVAL = 5.0


@pytest.fixture
def mail(app: App) -> Task[Any, Any]:
    @app.task(name="mail", queue="mail", priority=4, max_attempts=3)
    def mail(n: int = 0, s: str = "") -> None: ...

    return mail


@pytest.fixture
def listener(app: App) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute(app.queries["channel_listen"])
        # Marked idle, as a waiting worker's listener is: producers notify only then.
        conn.execute(
            app.queries["channel_idle_hold"],
            {"channel": app.queries.channel, "queues": ["mail", "other"]},
        )
        yield conn


def heard(listener: psycopg.Connection[Any], timeout: float = QUIET) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=timeout)]


def rows(db: Any, app: App) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT id, queue, task, payload, status, priority, max_attempts, entity_key, "
        f'idempotency_key FROM "{app.schema}".jobs ORDER BY id'
    ).fetchall()


def test_single_enqueue_writes_the_row_it_returns(app: App, db: Any, mail: Task[Any, Any]) -> None:
    one = mail.with_options(entity_key="user-1", priority=-2).enqueue(n=7, s="é")
    assert one == Enqueued(one.id)
    assert rows(db, app) == [
        (one.id, "mail", "mail", {"n": 7, "s": "é"}, "pending", -2, 3, "user-1", None)
    ]


@pytest.mark.parametrize("many", [False, True])
def test_run_at_and_delay_decide_the_status(app: App, db: Any, many: bool) -> None:
    @app.task(name="later")
    def later() -> None: ...

    soon = datetime.now(UTC) + timedelta(hours=1)
    past = datetime.now(UTC) - timedelta(hours=1)
    cases = [
        ({"delay": 60}, "scheduled"),
        ({"delay": timedelta(0)}, "pending"),
        ({"run_at": soon}, "scheduled"),
        ({"run_at": past}, "pending"),
        ({}, "pending"),
    ]
    for options, status in cases:
        count = 3 if many else 1
        ids = [e.id for e in later.with_options(**options).enqueue_many([{}] * count)]
        got = db.execute(
            f'SELECT status, run_at FROM "{app.schema}".jobs WHERE id = ANY(%s)', (ids,)
        ).fetchall()
        assert [s for s, _ in got] == [status] * count, options
        if "run_at" in options:
            assert {at for _, at in got} == {options["run_at"]}


def test_batch_ids_are_in_input_order_and_columns_shared(
    app: App, db: Any, mail: Task[Any, Any]
) -> None:
    results = mail.with_options(entity_key="e").enqueue_many([{"n": n} for n in range(1000)])
    assert not any(r.deduplicated for r in results)
    stored = {row[0]: row for row in rows(db, app)}
    assert len(stored) == 1000
    for n, result in enumerate(results):
        assert stored[result.id][3] == {"n": n}
    assert {row[1:3] + row[4:] for row in stored.values()} == {
        ("mail", "mail", "pending", 4, 3, "e", None)
    }
    # Input order is id order.
    assert [r.id for r in results] == sorted(r.id for r in results)


def test_batch_accepts_payloads_the_fast_encoding_leaves_to_the_careful_one(
    app: App, db: Any, mail: Task[Any, Any]
) -> None:
    class Payload(dict[str, Any]):
        pass

    payloads = [Payload(n=1), {"s": "\\u0000"}, {"s": "x" * 700}, {"s": "x" * 700}]
    small = App(app.dsn, app.schema, max_payload_bytes=1000)
    small.task(name="mail")(lambda n=0, s="": None)
    try:
        results = small.enqueue_many("mail", payloads)
        assert [row[3] for row in rows(db, app)] == [dict(p) for p in payloads]
        assert len(results) == 4
        with pytest.raises(InvalidPayload, match="NUL"):
            small.enqueue_many("mail", [{"s": "ok"}, {"s": "a\x00"}])
        with pytest.raises(InvalidPayload, match="over the limit"):
            small.enqueue_many("mail", [{"s": "ok"}, {"s": "x" * 1000}])
    finally:
        small.close()
    assert len(rows(db, app)) == 4


def test_single_with_a_held_key_resolves_to_the_holder_until_it_finishes(
    app: App, db: Any, mail: Task[Any, Any]
) -> None:
    keyed = mail.with_options(idempotency_key="order-1")
    first = keyed.enqueue(n=1)
    again = keyed.enqueue(n=2)
    assert not first.deduplicated
    assert again == Enqueued(first.id, deduplicated=True)
    db.execute(f"UPDATE \"{app.schema}\".jobs SET status = 'done' WHERE id = %s", (first.id,))
    after = keyed.enqueue(n=3)
    assert not after.deduplicated and after.id != first.id
    assert [r[3] for r in rows(db, app)] == [{"n": 1}, {"n": 3}]


def test_batch_sharing_a_key_makes_one_job_from_its_first_payload(
    app: App, db: Any, mail: Task[Any, Any]
) -> None:
    keyed = mail.with_options(idempotency_key="k", delay=60)
    made = keyed.enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}])
    assert made == [Enqueued(made[0].id)] + [Enqueued(made[0].id, deduplicated=True)] * 2
    held = keyed.enqueue_many([{"n": 4}, {"n": 5}])
    assert held == [Enqueued(made[0].id, deduplicated=True)] * 2
    assert [(r[3], r[4], r[8]) for r in rows(db, app)] == [({"n": 1}, "scheduled", "k")]


def test_empty_batch_writes_nothing(app: App, db: Any, mail: Task[Any, Any]) -> None:
    assert mail.enqueue_many([]) == []
    assert app.enqueue_many("mail", iter([])) == []
    assert rows(db, app) == []


@pytest.mark.parametrize("many", [False, True])
def test_notify_only_for_due_jobs_and_only_after_commit(
    app: App, mail: Task[Any, Any], listener: psycopg.Connection[Any], many: bool
) -> None:
    count = 5 if many else 1
    with psycopg.connect(app.dsn) as conn:
        mail.with_options(delay=3600).enqueue_many([{}] * count, conn=conn)
        conn.commit()
    assert heard(listener) == [], "a job due later woke someone"

    with psycopg.connect(app.dsn) as conn:
        mail.enqueue_many([{}] * count, conn=conn)
        mail.with_options(queue="other").enqueue_many([{}] * count, conn=conn)
        assert heard(listener) == [], "notified before the commit"
        conn.commit()
    got = [n.payload for n in listener.notifies(timeout=ARRIVAL, stop_after=2)]
    assert sorted(got + heard(listener)) == ["mail", "other"]

    # Autocommit (pooled): each call commits and notifies once per queue.
    mail.enqueue_many([{}] * count)
    assert [n.payload for n in listener.notifies(timeout=ARRIVAL, stop_after=1)] == ["mail"]
    assert heard(listener) == []


def test_deduplicated_single_wakes_nobody(
    app: App, mail: Task[Any, Any], listener: psycopg.Connection[Any]
) -> None:
    keyed = mail.with_options(idempotency_key="once")
    keyed.enqueue()
    assert [n.payload for n in listener.notifies(timeout=ARRIVAL, stop_after=1)] == ["mail"]
    assert keyed.enqueue().deduplicated
    assert heard(listener) == []


def test_rolled_back_enqueues_leave_nothing(
    app: App, db: Any, mail: Task[Any, Any], listener: psycopg.Connection[Any]
) -> None:
    async def scenario() -> None:
        async with (
            await psycopg.AsyncConnection.connect(app.dsn) as conn,
            conn.transaction(force_rollback=True),
        ):
            await mail.enqueue_async(n=1, conn=conn)
            await mail.enqueue_many_async([{"n": 2}, {"n": 3}], conn=conn)
            await app.enqueue_async("mail", {"n": 4}, conn=conn, idempotency_key="r")

    asyncio.run(scenario())
    assert rows(db, app) == []
    assert heard(listener) == []
