"""What the serializer of task arguments costs (docs/design.md, "Typed task arguments: the
serializer's cost"): building the jobs of an enqueue, decoding payloads into a task's
parameters, and draining jobs with a real burst worker, for a task of plain JSON (the fast
path), a task of stdlib types (datetime, Decimal, UUID, an enum, a dataclass) and a task taking
a pydantic model.  The variants run interleaved, and it prints min / median milliseconds.

    python -m bench.serializer_cost [--dsn postgresql://...] [--jobs 10000] [--drain 2000]
                                    [--repeat 5]

It works in a schema of its own (``bench_serializer``), dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import functools
import json
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pydantic
from psycopg import sql

from skiplock import App, Worker
from skiplock._db.enqueue import EnqueueOptions
from skiplock.serializer import PlainJSON

SCHEMA = "bench_serializer"


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


@dataclass
class Customer:
    id: uuid.UUID
    email: str
    since: date


class CustomerModel(pydantic.BaseModel):
    id: uuid.UUID
    email: str
    since: date


WHEN = datetime(2026, 12, 7, 9, 30, tzinfo=UTC)
CUSTOMER = Customer(uuid.UUID(int=7), "ada@example.com", date(2024, 3, 1))
PLAIN = {"customer_id": 7, "email": "ada@example.com", "amount_cents": 1999, "plan": "pro"}
TYPED = {"customer": CUSTOMER, "amount": Decimal("19.99"), "plan": Plan.PRO, "at": WHEN}
MODEL = {"customer": CustomerModel(id=uuid.UUID(int=7), email="a@b.c", since=date(2024, 3, 1))}


def register(app: App) -> dict[str, Any]:
    @app.task(name="plain")
    def plain(customer_id: int, email: str, amount_cents: int, plan: str) -> None: ...

    @app.task(name="plain_by_hand", serializer=PlainJSON())
    def plain_by_hand(customer_id: int, email: str, amount_cents: int, plan: str) -> None: ...

    @app.task(name="typed")
    def typed(customer: Customer, amount: Decimal, plan: Plan, at: datetime) -> None: ...

    @app.task(name="model")
    def model(customer: CustomerModel) -> None: ...

    return {"plain": plain, "plain_by_hand": plain_by_hand, "typed": typed, "model": model}


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1e3


def cells(times: list[float]) -> str:
    return f"{min(times):8.1f} / {statistics.median(times):8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=10_000, help="payloads built / decoded")
    parser.add_argument("--drain", type=int, default=2_000, help="jobs per measured drain")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    app = App(args.dsn, SCHEMA)
    app.migrate()
    tasks = register(app)
    try:
        payloads = {"plain": PLAIN, "plain_by_hand": PLAIN, "typed": TYPED, "model": MODEL}
        stored = {
            name: json.loads(app.build_jobs(name, [p], EnqueueOptions()).first_payload)
            for name, p in payloads.items()
        }
        build: dict[str, list[float]] = {name: [] for name in payloads}
        decode: dict[str, list[float]] = {name: [] for name in payloads}
        drain: dict[str, list[float]] = {name: [] for name in ("plain", "typed", "model")}
        truncate = sql.SQL("TRUNCATE {}").format(sql.Identifier(SCHEMA, "jobs"))
        for round_number in range(args.repeat):
            for name, payload in payloads.items():  # interleaved, one of each per round
                listed = [payload] * args.jobs
                build_all = functools.partial(app.build_jobs, name, listed, EnqueueOptions())
                build[name].append(timed(build_all))
                rows = [dict(stored[name]) for _ in range(args.jobs)]
                decode_all = functools.partial(list, map(tasks[name].decoding.decode, rows))
                decode[name].append(timed(decode_all))
            names = list(drain)
            shift = round_number % len(names)  # each variant drains first in some rounds
            for name in names[shift:] + names[:shift]:
                with psycopg.connect(args.dsn, autocommit=True) as db:
                    db.execute(truncate)  # each drain on an empty table
                tasks[name].enqueue_many([payloads[name]] * args.drain)
                worker = Worker(app, burst=True, concurrency=10)
                drain[name].append(timed(functools.partial(asyncio.run, worker.run())))
        print(f"min / median ms over {args.repeat} rounds, interleaved")
        print(f"{'task':14} {'build ' + str(args.jobs):>19} {'decode ' + str(args.jobs):>19}"
              f" {'drain ' + str(args.drain):>19}")  # fmt: skip
        for name in payloads:
            shown = cells(drain[name]) if name in drain else " " * 19
            print(f"{name:14} {cells(build[name])} {cells(decode[name])} {shown}")
        base = statistics.median(drain["plain"])
        for name in ("typed", "model"):
            print(f"drain median {name} / plain: {statistics.median(drain[name]) / base:.2f}")
    finally:
        app.sync_client.drop_schema()
        app.close()


if __name__ == "__main__":
    main()
