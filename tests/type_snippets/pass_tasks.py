"""Uses of the public API that must type-check (mypy --strict and pyright strict)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg

from skiplock import App, Enqueued, JobContext
from skiplock.serializer import Decoder, JSONSerializer, PlainJSON, Serializer


@dataclass
class Receipt:
    order_id: uuid.UUID
    total: Decimal


class Cents(JSONSerializer):
    def decoder(self, annotation: Any) -> Decoder | None:
        return super().decoder(annotation)


app = App(serializer=JSONSerializer())
custom: Serializer = Cents()


@app.task(queue="billing", store_result=True)
def charge(order_id: uuid.UUID, total: Decimal, at: datetime | None = None) -> Receipt:
    return Receipt(order_id, total)


@app.task(serializer=PlainJSON())
async def notify(user_id: int, text: str = "") -> int:
    return user_id


@app.task(pass_context=True, serializer=custom)
def audit(ctx: JobContext, order_id: int) -> str:
    return ctx.worker_id


def enqueue_all(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    job: Enqueued = charge.enqueue(order_id=uuid.uuid4(), total=Decimal("1.50"))
    charge.enqueue(conn, uuid.uuid4(), Decimal(2), datetime.now(UTC))
    charge.with_options(priority=1).enqueue(order_id=uuid.uuid4(), total=Decimal(1), conn=conn)
    audit.enqueue(order_id=7)
    receipt: Receipt = charge(uuid.uuid4(), Decimal(1))
    stored: Receipt = charge.decode_result({"order_id": str(receipt.order_id), "total": "1"})
    return job.id + len(str(stored.total))


async def enqueue_async() -> int:
    job = await notify.enqueue_async(user_id=1, text="hi")
    value: int = await notify(2)
    return job.id + value
