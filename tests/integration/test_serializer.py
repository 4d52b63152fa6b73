"""Task arguments and results through the serializer, with a real worker: datetimes, dates,
times, UUIDs, Decimals, enums, dataclasses and pydantic models round-trip into the parameters'
annotated types for sync and async tasks; the table holds plain JSON that a producer in any
language writes; a value that cannot be encoded is refused at enqueue, naming the argument, with
nothing written; a row whose argument does not decode fails that job alone, not retried."""

from __future__ import annotations

import asyncio
import enum
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import psycopg
import pydantic
import pytest
from psycopg import sql

from skiplock import App, ConfigurationError, InvalidPayload, JobContext, JobStatus, Worker
from skiplock._task_settings import WorkerModel
from skiplock.serializer import JSONSerializer, PlainJSON


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


@dataclass(frozen=True)
class Address:
    city: str
    since: date


class User(pydantic.BaseModel):
    id: uuid.UUID
    name: str
    joined: datetime


WHEN = datetime(2026, 12, 7, 10, 30, 15, 250000, tzinfo=UTC)
USER = User(id=uuid.UUID(int=7), name="Ada", joined=WHEN)
ARGUMENTS: dict[str, Any] = {
    "when": WHEN,
    "day": date(2026, 12, 24),
    "at": time(9, 45),
    "ref": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "amount": Decimal("1999.95"),
    "tier": Tier.GOLD,
    "address": Address("Lyon", date(2020, 1, 31)),
    "user": USER,
    "history": [Decimal("1.10"), Decimal("2.20")],
    "by_day": {"mon": date(2026, 12, 7)},
    "maybe": None,
    "plain": {"n": 1, "s": ["a"]},
}
# What the table holds for ARGUMENTS: plain JSON, no type names.
STORED = {
    "when": "2026-12-07T10:30:15.250000+00:00",
    "day": "2026-12-24",
    "at": "09:45:00",
    "ref": "12345678-1234-5678-1234-567812345678",
    "amount": "1999.95",
    "tier": "gold",
    "address": {"city": "Lyon", "since": "2020-01-31"},
    "user": {
        "id": "00000000-0000-0000-0000-000000000007",
        "name": "Ada",
        "joined": "2026-12-07T10:30:15.250000Z",
    },
    "history": ["1.10", "2.20"],
    "by_day": {"mon": "2026-12-07"},
    "maybe": None,
    "plain": {"n": 1, "s": ["a"]},
}


def burst(app: App, model: WorkerModel = "lease") -> None:
    worker = Worker(app, burst=True, poll_interval=0.05, model=model)
    asyncio.run(asyncio.wait_for(worker.run(), 30))


def register_typed(app: App, received: dict[str, dict[str, Any]]) -> None:
    """Two tasks, one sync and one async, of the same typed parameters, that keep what they got
    and return a typed value."""

    @app.task(name="typed_sync", store_result=True)
    def typed_sync(
        when: datetime,
        day: date,
        at: time,
        ref: uuid.UUID,
        amount: Decimal,
        tier: Tier,
        address: Address,
        user: User,
        history: list[Decimal],
        by_day: dict[str, date],
        maybe: datetime | None,
        plain: dict[str, Any],
    ) -> Address:
        received["typed_sync"] = {k: v for k, v in locals().items() if k != "received"}
        return address

    @app.task(name="typed_async", store_result=True)
    async def typed_async(
        when: datetime,
        day: date,
        at: time,
        ref: uuid.UUID,
        amount: Decimal,
        tier: Tier,
        address: Address,
        user: User,
        history: list[Decimal],
        by_day: dict[str, date],
        maybe: datetime | None,
        plain: dict[str, Any],
    ) -> dict[str, Decimal]:
        received["typed_async"] = {k: v for k, v in locals().items() if k != "received"}
        return {"total": amount * 2}


def stored_payload(db: Any, schema: str, job_id: int) -> Any:
    query = sql.SQL("SELECT payload::text FROM {} WHERE id = %s")
    (text,) = db.execute(query.format(sql.Identifier(schema, "jobs")), (job_id,)).fetchone()
    return json.loads(text)


def test_arguments_round_trip_into_the_annotated_types(app: App, db: Any) -> None:
    received: dict[str, dict[str, Any]] = {}
    register_typed(app, received)
    sync_job = app.tasks["typed_sync"].enqueue(**ARGUMENTS)
    async_job = asyncio.run(app.tasks["typed_async"].enqueue_async(**ARGUMENTS))
    # The table holds plain JSON, readable (and writable) by any producer.
    assert stored_payload(db, app.schema, sync_job.id) == STORED
    assert stored_payload(db, app.schema, async_job.id) == STORED
    burst(app)
    for name in ("typed_sync", "typed_async"):
        got = received[name]
        assert got == ARGUMENTS, name
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in ARGUMENTS.items()}
        assert type(got["by_day"]["mon"]) is date and type(got["history"][0]) is Decimal
    done = app.get_job(sync_job.id), app.get_job(async_job.id)
    assert [j.status if j else None for j in done] == [JobStatus.DONE, JobStatus.DONE]
    assert done[0] is not None and done[1] is not None
    assert done[0].result == {"city": "Lyon", "since": "2020-01-31"}
    assert done[1].result == {"total": "3999.90"}
    assert app.tasks["typed_sync"].decode_result(done[0].result) == ARGUMENTS["address"]
    assert app.tasks["typed_async"].decode_result(done[1].result) == {"total": Decimal("3999.90")}


def test_a_producer_writing_json_in_sql_gets_typed_arguments(app: App, db: Any) -> None:
    """A job inserted by plain SQL, as a program in another language would, with the wire format
    of docs/tasks.md: the task gets the types it declares."""
    received: dict[str, dict[str, Any]] = {}
    register_typed(app, received)
    insert = sql.SQL("INSERT INTO {} (queue, task, payload) VALUES ('default', %s, %s::jsonb)")
    wire = {**STORED, "when": "2026-12-07T10:30:15.25Z", "amount": 1999.95, "maybe": None}
    for name in ("typed_sync", "typed_async"):
        db.execute(insert.format(sql.Identifier(app.schema, "jobs")), (name, json.dumps(wire)))
    burst(app)
    for name in ("typed_sync", "typed_async"):
        assert received[name] == ARGUMENTS, name


def test_a_value_that_cannot_be_encoded_names_its_argument_and_writes_nothing(
    app: App, db: Any
) -> None:
    @app.task(name="pay")
    def pay(amount: Decimal, note: Any = None) -> None: ...

    count = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(app.schema, "jobs"))
    with psycopg.connect(app.dsn) as conn:
        conn.execute("SELECT 1")  # the caller's transaction, open
        for enqueue in (
            lambda: pay.enqueue(amount=Decimal(1), note=1j, conn=conn),
            lambda: pay.enqueue_many(
                [{"amount": Decimal(1)}, {"amount": 1, "note": object()}], conn=conn
            ),
            lambda: app.enqueue("pay", {"amount": Decimal("NaN")}, conn=conn),
        ):
            with pytest.raises(InvalidPayload) as info:
                enqueue()
            message = str(info.value)
            assert "task 'pay'" in message and "not JSON-serialisable" in message, message
            assert "argument 'note'" in message or "argument 'amount'" in message, message
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert conn.execute(count).fetchone() == (0,)
    with pytest.raises(InvalidPayload, match=r"argument 'note'.*complex"):
        asyncio.run(pay.enqueue_async(amount=Decimal(1), note=1j))
    assert db.execute(count).fetchone() == (0,)


def test_bounds_apply_to_the_encoded_form(app: App, pg_dsn: str, db: Any) -> None:
    small = App(pg_dsn, app.schema, max_payload_bytes=200)
    try:

        @small.task(name="many")
        def many(refs: list[uuid.UUID]) -> None: ...

        # Five UUID objects are small in Python; their JSON text is 5 x 38 bytes and more.
        with pytest.raises(InvalidPayload, match="over the limit of 200 bytes"):
            many.enqueue(refs=[uuid.uuid4() for _ in range(5)])
    finally:
        small.close()

    @dataclass
    class Node:
        child: Any

    @app.task(name="tree")
    def tree(root: Any) -> None: ...

    deep: Any = None
    for _ in range(70):
        deep = Node(deep)
    with pytest.raises(InvalidPayload, match="nested deeper than the limit of 64"):
        tree.enqueue(root=deep)
    schema = app.schema
    count = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "jobs"))
    assert db.execute(count).fetchone() == (0,)


def test_a_row_whose_argument_does_not_decode_fails_that_job_alone(app: App, db: Any) -> None:
    seen: list[Any] = []

    @app.task(name="remind", max_attempts=5)
    def remind(when: datetime, tier: Tier = Tier.SILVER) -> None:
        seen.append((when, tier))

    @app.task(name="remind_async", max_attempts=5)
    async def remind_async(user: User) -> None:
        seen.append(user)

    good = remind.enqueue(when=WHEN)
    bad_time = app.enqueue("remind", {"when": "next tuesday"})
    bad_enum = app.enqueue("remind", {"when": "2026-12-07T10:00:00Z", "tier": "platinum"})
    bad_model = app.enqueue("remind_async", {"user": {"id": "not a uuid", "name": "x"}})
    burst(app)
    assert seen == [(WHEN, Tier.SILVER)]
    assert (job := app.get_job(good.id)) is not None and job.status == JobStatus.DONE
    for enqueued, argument, why in (
        (bad_time, "when", "Invalid isoformat string: 'next tuesday'"),
        (bad_enum, "tier", "'platinum' is not a valid Tier"),
        (bad_model, "user", "validation error"),
    ):
        job = app.get_job(enqueued.id)
        assert job is not None and job.status == JobStatus.FAILED and job.attempts == 1
        assert job.last_error is not None
        headline = job.last_error.splitlines()[0]
        assert headline.startswith(f"ArgumentDecodeError: argument {argument!r}: "), headline
        assert why in job.last_error
        assert "not retried: its payload does not decode into the parameters" in job.last_error


def test_a_task_can_take_plain_json_or_a_serializer_of_its_own(app: App) -> None:
    class Complex(JSONSerializer):
        """Also complex numbers, as [real, imaginary]."""

        def encode(self, value: Any) -> Any:
            if isinstance(value, complex):
                return [value.real, value.imag]
            return super().encode(value)

        def decoder(self, annotation: Any) -> Any:
            if annotation is complex:
                return lambda pair: complex(*pair)
            return super().decoder(annotation)

    got: list[Any] = []

    @app.task(name="raw", serializer=PlainJSON())
    def raw(when: datetime) -> None:
        got.append(when)

    @app.task(name="wave", serializer=Complex())
    def wave(z: complex, when: datetime) -> None:
        got.append((z, when))

    with pytest.raises(ConfigurationError, match="an instance, not the class"):
        app.task(name="wrong", serializer=JSONSerializer)(print)  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="encode"):
        App(serializer=json)  # type: ignore[arg-type]
    with pytest.raises(InvalidPayload, match=r"argument 'when'.*convert dates"):
        raw.enqueue(when=WHEN)
    raw.enqueue(when="2026-12-07")  # type: ignore[arg-type]  # plain JSON: passed as it is
    wave.enqueue(z=1 + 2j, when=WHEN)
    burst(app)
    assert sorted(got, key=str) == sorted(["2026-12-07", (1 + 2j, WHEN)], key=str)


def test_held_lock_tasks_with_their_context_get_typed_arguments(app: App) -> None:
    """The held-lock model (an async task with ``ctx.conn`` runs in a savepoint) and tasks that
    take their context first: the context is not an argument to decode, the others are."""
    got: list[Any] = []

    @app.task(name="held_async", pass_context=True, store_result=True)
    async def held_async(ctx: JobContext, user: User, amount: Decimal) -> Address:
        assert ctx.conn is not None
        got.append((user, amount))
        return Address("Oslo", user.joined.date())

    @app.task(name="held_sync", pass_context=True)
    def held_sync(ctx: JobContext, tier: Tier, refs: set[uuid.UUID]) -> None:
        got.append((tier, refs))

    first = held_async.enqueue(user=USER, amount=Decimal("0.10"))
    held_sync.enqueue(tier=Tier.SILVER, refs={uuid.UUID(int=1), uuid.UUID(int=2)})
    burst(app, model="held")
    assert sorted(got, key=repr) == sorted(
        [(USER, Decimal("0.10")), (Tier.SILVER, {uuid.UUID(int=1), uuid.UUID(int=2)})], key=repr
    )
    job = app.get_job(first.id)
    assert job is not None and job.status == JobStatus.DONE
    assert held_async.decode_result(job.result) == Address("Oslo", WHEN.date())
