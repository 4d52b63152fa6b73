"""Misuses of the public API: a type checker must flag every line marked ``# error``, and no
other line (mypy --strict and pyright strict)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal

from skiplock import App, JobContext


@dataclass
class Receipt:
    order_id: uuid.UUID
    total: Decimal


app = App()


@app.task(store_result=True)
def charge(order_id: uuid.UUID, total: Decimal) -> Receipt:
    return Receipt(order_id, total)


@app.task
async def notify(user_id: int) -> int:
    return user_id


@app.task(pass_context=True)
def audit(ctx: JobContext, order_id: int) -> str:
    return ctx.worker_id


def wrong_arguments() -> None:
    charge.enqueue(order_id="not-a-uuid", total=Decimal(1))  # error
    charge.enqueue(order_id=uuid.uuid4(), total=1.5)  # error
    charge.enqueue(order_id=uuid.uuid4())  # error
    charge.enqueue(order_id=uuid.uuid4(), total=Decimal(1), totl=Decimal(1))  # error
    charge.with_options(priority=1).enqueue(total=Decimal(1))  # error
    audit.enqueue(order_id="7")  # error


async def wrong_async() -> None:
    await notify.enqueue_async(user_id="1")  # error
    await notify.enqueue_async()  # error


def wrong_results() -> list[object]:
    name: str = charge(uuid.uuid4(), Decimal(1))  # error
    total: int = charge.decode_result({}).total  # error
    job_id: str = charge.enqueue(order_id=uuid.uuid4(), total=Decimal(1)).id  # error
    print(charge.decode_result({}).amount)  # error
    return [name, total, job_id]


def wrong_options() -> None:
    App(serializer="json")  # error
    app.task(serializer=42)  # error
    charge.with_options(priority="high")  # error
