"""Arguments are checked at enqueue against the task's signature, as the worker will call it:
a payload the task cannot take is refused at once (nothing written), not retried as a
``TypeError`` in the worker."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from skiplock import App, InvalidArguments, JobContext, SkiplockError


def count(db: psycopg.Connection[Any], app: App) -> int:
    row = db.execute(f'SELECT count(*) FROM "{app.schema}".jobs').fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def shop(app: App) -> App:
    @app.task(name="shop.send_receipt", queue="mail", max_attempts=2)
    def send_receipt(order_id: int, copy: bool = False) -> None: ...

    @app.task(name="shop.audit", pass_context=True)
    def audit(ctx: JobContext, order_id: int) -> None: ...

    @app.task(name="shop.log")
    def log(level: str, **fields: Any) -> None: ...

    @app.task(name="shop.ping")
    async def ping() -> None: ...

    return app


def test_a_payload_the_task_cannot_take_is_refused_at_once(
    shop: App, db: psycopg.Connection[Any]
) -> None:
    send = shop.get_task("shop.send_receipt")
    refused: list[tuple[Any, str]] = [
        (lambda: send.enqueue(order_idd=7), "unexpected argument 'order_idd'"),
        (lambda: send.enqueue(), "missing argument 'order_id' (it takes order_id, copy=False)"),
        (lambda: send.with_options(priority=3).enqueue(wrong=1), "'wrong'"),
        (lambda: send.enqueue_many([{"order_id": 1}, {"order": 2}]), "'order'"),
        (lambda: shop.enqueue("shop.send_receipt", {"copy": True}), "'order_id'"),
        (lambda: shop.enqueue_many("shop.ping", [{}, {"x": 1}]), "'x'"),
        # the worker passes the context itself: the payload cannot name it too
        (lambda: shop.enqueue("shop.audit", {"ctx": 1, "order_id": 1}), "'ctx'"),
        (lambda: shop.enqueue("shop.log", {"fields": 1}), "'level'"),
    ]
    for enqueue, problem in refused:
        with pytest.raises(InvalidArguments) as caught:
            enqueue()
        message = str(caught.value)
        assert problem in message, message
        assert isinstance(caught.value, TypeError) and isinstance(caught.value, SkiplockError)
        assert message.startswith("task 'shop."), message
    with pytest.raises(InvalidArguments, match=r"shop\.send_receipt"):
        asyncio.run(send.enqueue_async(order_idd=7))
    with pytest.raises(InvalidArguments, match=r"shop\.send_receipt"):
        asyncio.run(send.with_options(delay=1).enqueue_many_async([{"nope": 1}]))
    assert count(db, shop) == 0

    # What the worker can call is accepted: defaults, the context, **kwargs.
    send.enqueue(order_id=7)
    send.enqueue_many([{"order_id": 8, "copy": True}])
    shop.enqueue("shop.audit", {"order_id": 1})
    shop.enqueue("shop.log", {"level": "info", "anything": [1], "else": None})
    shop.enqueue("shop.ping")
    assert count(db, shop) == 5


def test_a_periodic_task_whose_payload_does_not_fit_is_refused_at_registration(app: App) -> None:
    with pytest.raises(InvalidArguments, match="'report'"):

        @app.periodic(every=60, name="reports.daily", payload={"day": "today"})
        def daily(report: str) -> None: ...


def test_what_mypy_accepts_of_enqueue_runs(shop: App, db: psycopg.Connection[Any]) -> None:
    """The typed ``enqueue`` puts ``conn`` before the task's own arguments (a ParamSpec admits
    no keyword-only parameter beside it), so a type checker accepts ``conn`` positionally and the
    task's arguments by position after it: those calls enqueue the same job as by name."""
    send = shop.get_task("shop.send_receipt")
    audit = shop.get_task("shop.audit")
    with psycopg.connect(shop.dsn) as conn:
        send.enqueue(conn, order_id=1)
        send.with_options(priority=3).enqueue(conn, 2, copy=True)
        audit.enqueue(conn, 3)  # the context is the worker's: 3 is order_id
    send.enqueue(None, 4)
    asyncio.run(send.enqueue_async(None, 5, True))
    rows = db.execute(f'SELECT task, payload FROM "{shop.schema}".jobs ORDER BY id').fetchall()
    assert rows == [
        ("shop.send_receipt", {"order_id": 1}),
        ("shop.send_receipt", {"order_id": 2, "copy": True}),
        ("shop.audit", {"order_id": 3}),
        ("shop.send_receipt", {"order_id": 4}),
        ("shop.send_receipt", {"order_id": 5, "copy": True}),
    ]
    # What a payload cannot carry is still refused, saying why; a payload or a value given
    # where conn goes is not taken for a missing argument.
    log = shop.get_task("shop.log")
    for call, problem in [
        (lambda: send.enqueue({"order_id": 1}), "first positional argument is conn"),
        (lambda: send.enqueue(1), "first positional argument is conn"),
        (lambda: send.with_options(delay=1).enqueue("x"), "not a str"),
        (lambda: send.enqueue(None, 1, True, 3), "at most 2 positional"),
        (lambda: send.enqueue(None, 1, order_id=2), "'order_id' twice"),
        (lambda: log.enqueue(None, "info", "extra"), "at most 1 positional"),
    ]:
        with pytest.raises(InvalidArguments, match=problem):
            call()
    assert count(db, shop) == 5
