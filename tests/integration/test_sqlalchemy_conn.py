"""``enqueue(conn=session)``: the job commits or rolls back with the SQLAlchemy transaction it
was enqueued in: a ``Session`` (and Flask-SQLAlchemy's ``scoped_session``), a ``Connection``
used commit-as-you-go, and their asyncio twins.  A real SQLAlchemy (the ``test`` extra) on the
``postgresql+psycopg`` dialect, against the test server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import Column, Engine, Integer, MetaData, Table, create_engine, insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from skiplock import App, Task, Worker


class Boom(Exception):
    pass


def url(pg_dsn: str, driver: str) -> Any:
    """``pg_dsn`` as an SQLAlchemy URL for ``driver`` (its query string kept)."""
    return make_url(pg_dsn).set(drivername=f"postgresql+{driver}")


@pytest.fixture
def engine(pg_dsn: str) -> Iterator[Engine]:
    engine = create_engine(url(pg_dsn, "psycopg"))
    yield engine
    engine.dispose()


@pytest.fixture
def orders(app: App, db: psycopg.Connection[Any]) -> Table:
    db.execute(
        f'CREATE TABLE "{app.schema}".orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY)'
    )
    return Table("orders", MetaData(schema=app.schema), Column("id", Integer, primary_key=True))


@pytest.fixture
def ran() -> list[int]:
    return []


@pytest.fixture
def receipt(app: App, ran: list[int]) -> Task[Any, Any]:
    @app.task(name="send_receipt", queue="receipts")
    def send_receipt(order_id: int) -> None:
        ran.append(order_id)

    return send_receipt


def add_order(session: Any, orders: Table) -> int:
    """The business write, through SQLAlchemy (a Session or a Connection)."""
    return int(session.execute(insert(orders).returning(orders.c.id)).scalar_one())


def committed(db: psycopg.Connection[Any], app: App) -> tuple[list[int], list[int]]:
    """Order ids, and the order ids of the jobs, that another session sees."""
    order_ids = [r[0] for r in db.execute(f'SELECT id FROM "{app.schema}".orders ORDER BY id')]
    job_orders = db.execute(
        f"SELECT (payload->>'order_id')::bigint FROM \"{app.schema}\".jobs ORDER BY 1"
    )
    return order_ids, [r[0] for r in job_orders]


def test_a_job_enqueued_in_a_session_commits_with_the_order_and_a_worker_runs_it(
    app: App, db: Any, engine: Engine, orders: Table, receipt: Task[Any, Any], ran: list[int]
) -> None:
    with Session(engine) as session, session.begin():
        order_id = add_order(session, orders)
        receipt.enqueue(order_id=order_id, conn=session)
        assert committed(db, app) == ([], [])
    assert committed(db, app) == ([order_id], [order_id])
    assert asyncio.run(Worker(app, burst=True).run()).done == 1
    assert ran == [order_id]


def test_a_session_rolled_back_or_closed_without_commit_keeps_no_job(
    app: App, db: Any, engine: Engine, orders: Table, receipt: Task[Any, Any]
) -> None:
    with pytest.raises(Boom), Session(engine) as session, session.begin():
        receipt.enqueue(order_id=add_order(session, orders), conn=session)
        raise Boom
    with Session(engine) as session:
        receipt.enqueue(order_id=1, conn=session)  # the first statement: begins the transaction
        session.rollback()
        receipt.enqueue(order_id=2, conn=session)  # and a new one after the rollback
    assert committed(db, app) == ([], [])
    with Session(engine) as session:
        receipt.enqueue(order_id=3, conn=session)
        order_id = add_order(session, orders)
        session.commit()
    assert committed(db, app) == ([order_id], [3])


def test_a_connection_commit_as_you_go_commits_the_job_and_close_discards_it(
    app: App, db: Any, engine: Engine, orders: Table, receipt: Task[Any, Any]
) -> None:
    # Only the driver connection (conn.connection.driver_connection) would lose this job:
    # SQLAlchemy, with no transaction of its own begun, would not commit it.
    with engine.connect() as conn:
        receipt.enqueue(order_id=1, conn=conn)
        assert conn.in_transaction()
        conn.commit()
        receipt.enqueue(order_id=2, conn=conn)  # never committed: rolled back by close()
    with engine.begin() as conn:
        receipt.enqueue_many([{"order_id": 3}, {"order_id": 4}], conn=conn)
    assert committed(db, app) == ([], [1, 3, 4])


def test_a_scoped_session_as_flask_sqlalchemy_has_it(
    app: App, db: Any, engine: Engine, orders: Table, receipt: Task[Any, Any]
) -> None:
    session = scoped_session(sessionmaker(engine))
    try:
        order_id = add_order(session, orders)
        app.enqueue("send_receipt", {"order_id": order_id}, conn=session)
        session.commit()
        receipt.enqueue(order_id=add_order(session, orders), conn=session)
        session.rollback()
    finally:
        session.remove()
    assert committed(db, app) == ([order_id], [order_id])


def test_async_session_and_connection(
    app: App, db: Any, pg_dsn: str, orders: Table, receipt: Task[Any, Any]
) -> None:
    async def scenario() -> int:
        engine = create_async_engine(url(pg_dsn, "psycopg"))
        try:
            async with AsyncSession(engine) as session, session.begin():
                result = await session.execute(insert(orders).returning(orders.c.id))
                order_id = int(result.scalar_one())
                await receipt.enqueue_async(order_id=order_id, conn=session)
            with pytest.raises(Boom):
                async with AsyncSession(engine) as session, session.begin():
                    await receipt.enqueue_async(order_id=-1, conn=session)
                    raise Boom
            async with engine.connect() as conn:
                await receipt.enqueue_many_async([{"order_id": 10}], conn=conn)
                await conn.commit()
                await app.enqueue_async("send_receipt", {"order_id": -2}, conn=conn)
            return order_id
        finally:
            await engine.dispose()

    order_id = asyncio.run(scenario())
    assert committed(db, app) == ([order_id], [order_id, 10])


def test_objects_skiplock_cannot_write_through_are_refused_with_what_to_pass(
    app: App, db: Any, pg_dsn: str, engine: Engine, orders: Table, receipt: Task[Any, Any]
) -> None:
    with pytest.raises(TypeError, match=r"postgresql\+psycopg://"):
        old_driver = create_engine(url(pg_dsn, "psycopg2"))
        try:
            with Session(old_driver) as session:
                receipt.enqueue(order_id=1, conn=session)
        finally:
            old_driver.dispose()
    with pytest.raises(TypeError, match="an Engine has none"):
        receipt.enqueue(order_id=1, conn=engine)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"synchronous .*call the method without _async"):
        asyncio.run(receipt.enqueue_async(order_id=1, conn=Session(engine)))  # type: ignore[arg-type]

    async def async_mistakes() -> None:
        engine = create_async_engine(url(pg_dsn, "asyncpg"))
        try:
            with pytest.raises(TypeError, match=r"asyncpg, not psycopg 3"):
                async with AsyncSession(engine) as session:
                    await receipt.enqueue_async(order_id=1, conn=session)
        finally:
            await engine.dispose()
        psycopg_engine = create_async_engine(url(pg_dsn, "psycopg"))
        try:
            with pytest.raises(TypeError, match=r"asynchronous .*call the _async method"):
                async with AsyncSession(psycopg_engine) as session:
                    receipt.enqueue(order_id=1, conn=session)  # type: ignore[arg-type]
        finally:
            await psycopg_engine.dispose()

    asyncio.run(async_mistakes())
    assert committed(db, app) == ([], [])


def test_a_plain_postgresql_url_is_psycopg_3_from_sqlalchemy_2_1(
    app: App, db: Any, pg_dsn: str, orders: Table, receipt: Task[Any, Any]
) -> None:
    """SQLAlchemy 2.1 made psycopg 3 the driver of ``postgresql://`` (2.0: psycopg2, refused
    with the way out); the async engine's too."""
    plain = make_url(pg_dsn).set(drivername="postgresql")
    engine = create_engine(plain)
    try:
        if sqlalchemy_version() < (2, 1):
            with pytest.raises(TypeError, match=r"postgresql\+psycopg://"), Session(engine) as s:
                receipt.enqueue(order_id=1, conn=s)
            return
        with Session(engine) as session, session.begin():
            order_id = session.execute(insert(orders).returning(orders.c.id)).scalar_one()
            receipt.enqueue(order_id=order_id, conn=session)
    finally:
        engine.dispose()

    async def scenario() -> int:
        engine = create_async_engine(plain)
        try:
            async with AsyncSession(engine) as session, session.begin():
                result = await session.execute(insert(orders).returning(orders.c.id))
                order_id = result.scalar_one()
                await receipt.enqueue_async(order_id=order_id, conn=session)
            return int(order_id)
        finally:
            await engine.dispose()

    second = asyncio.run(scenario())
    assert committed(db, app) == ([order_id, second], [order_id, second])


def sqlalchemy_version() -> tuple[int, int]:
    major, minor = sqlalchemy.__version__.split(".")[:2]
    return int(major), int(minor)
