"""``enqueue(conn=django.db.connection)``: the job commits or rolls back with the Django
transaction it was enqueued in (``atomic()``, its savepoints, or Django's autocommit), and a
worker runs it.  A real Django (the ``test`` extra) on the test server; no models needed: the
business write goes through Django's own cursor, so it is in Django's transaction.
"""

from __future__ import annotations

import asyncio
import importlib
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import psycopg
import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from psycopg.conninfo import conninfo_to_dict

from skiplock import App, ConfigurationError, Task, Worker
from skiplock._db.migrations import all_migrations
from skiplock.contrib.django import DjangoApp
from skiplock.contrib.django import migrations as contrib_migrations
from skiplock.contrib.django.schema import SkiplockMigrations
from skiplock.testing import assert_enqueued, assert_not_enqueued


class Boom(Exception):
    pass


# A database backend of another package, as instrumented ones (django-prometheus...) are.
WRAPPED_BACKEND = """
from django.db.backends.postgresql.base import DatabaseWrapper as PostgresWrapper


class DatabaseWrapper(PostgresWrapper):
    pass
"""


@pytest.fixture(scope="module", autouse=True)
def django_settings(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Django pointed at the test server (``default``, and ``wrapped`` through a backend of
    another package) and at an SQLite database (``lite``)."""
    folder = tmp_path_factory.mktemp("backends")
    (folder / "wrapped_backend").mkdir()
    (folder / "wrapped_backend" / "__init__.py").write_text("")
    (folder / "wrapped_backend" / "base.py").write_text(WRAPPED_BACKEND)
    sys.path.insert(0, str(folder))
    params: dict[str, Any] = dict(conninfo_to_dict(pg_dsn))
    default = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", ""),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "OPTIONS": params,
    }
    wrapped = {**default, "ENGINE": "wrapped_backend"}
    lite = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    if not settings.configured:
        databases = {"default": default, "wrapped": wrapped, "lite": lite}
        settings.configure(DATABASES=databases, USE_TZ=True)
        django.setup()
    yield
    connections.close_all()
    sys.path.remove(str(folder))


@pytest.fixture
def orders(app: App, db: psycopg.Connection[Any]) -> str:
    table = f'"{app.schema}".orders'
    db.execute(f"CREATE TABLE {table} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY)")
    return table


@pytest.fixture
def ran() -> list[int]:
    return []


@pytest.fixture
def receipt(app: App, ran: list[int]) -> Task[Any, Any]:
    @app.task(name="send_receipt", queue="receipts")
    def send_receipt(order_id: int) -> None:
        ran.append(order_id)

    return send_receipt


def insert_order(orders: str) -> int:
    """The business write, through Django (so inside whatever transaction Django has open)."""
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {orders} DEFAULT VALUES RETURNING id")
        return int(cursor.fetchone()[0])


def committed(db: psycopg.Connection[Any], app: App, orders: str) -> tuple[list[int], list[int]]:
    """Order ids, and the order ids of the jobs, that another session sees."""
    order_ids = [r[0] for r in db.execute(f"SELECT id FROM {orders} ORDER BY id")]
    job_orders = db.execute(
        f"SELECT (payload->>'order_id')::bigint FROM \"{app.schema}\".jobs ORDER BY 1"
    )
    return order_ids, [r[0] for r in job_orders]


def test_a_job_enqueued_in_atomic_commits_with_the_order_and_a_worker_runs_it(
    app: App, db: Any, orders: str, receipt: Task[Any, Any], ran: list[int]
) -> None:
    with transaction.atomic():
        order_id = insert_order(orders)
        enqueued = receipt.enqueue(order_id=order_id, conn=connection)
        assert committed(db, app, orders) == ([], [])  # not yet visible to anyone else
    assert committed(db, app, orders) == ([order_id], [order_id])
    job = app.get_job(enqueued.id)
    assert job is not None and job.status == "pending"
    assert asyncio.run(Worker(app, burst=True).run()).done == 1
    assert ran == [order_id]


def test_testing_helpers_see_the_jobs_of_an_uncommitted_django_transaction(
    app: App, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    # What a Django TestCase does: the test's writes happen in atomic() and are rolled back.
    with pytest.raises(Boom), transaction.atomic():
        order_id = insert_order(orders)
        receipt.enqueue(order_id=order_id, conn=connection)
        job = assert_enqueued(receipt, payload={"order_id": order_id}, conn=connection)
        assert job.status == "pending"
        assert_not_enqueued(receipt, payload={"order_id": order_id})  # others do not see it
        raise Boom
    assert_not_enqueued(receipt, payload={"order_id": order_id}, conn=connection)


def test_an_exception_in_atomic_rolls_back_the_order_and_its_job(
    app: App, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    with pytest.raises(Boom), transaction.atomic():
        enqueued = receipt.enqueue(order_id=insert_order(orders), conn=connection)
        raise Boom
    assert committed(db, app, orders) == ([], [])
    assert app.get_job(enqueued.id) is None


def test_a_rolled_back_savepoint_takes_only_its_own_job(
    app: App, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    with transaction.atomic():
        kept = insert_order(orders)
        receipt.enqueue(order_id=kept, conn=connection)
        with pytest.raises(Boom), transaction.atomic():  # a savepoint
            receipt.enqueue(order_id=insert_order(orders), conn=connection)
            raise Boom
    assert committed(db, app, orders) == ([kept], [kept])


def test_outside_atomic_django_autocommits_and_so_does_the_job(
    app: App, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    connection.close()  # not connected yet: enqueue connects it, as a query would
    receipt.enqueue(order_id=7, conn=connection)
    assert connection.get_autocommit()
    assert committed(db, app, orders) == ([], [7])


def test_connections_by_alias_enqueue_many_and_app_enqueue_take_part_in_atomic(
    app: App, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    with pytest.raises(Boom), transaction.atomic():
        receipt.enqueue_many([{"order_id": i} for i in (1, 2, 3)], conn=connections["default"])
        app.enqueue("send_receipt", {"order_id": 4}, conn=connection)
        assert len(committed(db, app, orders)[1]) == 0
        raise Boom
    assert committed(db, app, orders) == ([], [])
    with transaction.atomic():
        receipt.enqueue_many([{"order_id": i} for i in (1, 2, 3)], conn=connections["default"])
        app.enqueue("send_receipt", {"order_id": 4}, conn=connection)
    assert committed(db, app, orders) == ([], [1, 2, 3, 4])


def test_a_backend_of_another_package_is_recognised_by_its_class(
    app: App, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    wrapped = connections["wrapped"]
    assert type(wrapped).__module__ == "wrapped_backend.base"
    with pytest.raises(Boom), transaction.atomic(using="wrapped"):
        receipt.enqueue(order_id=1, conn=wrapped)
        raise Boom
    with transaction.atomic(using="wrapped"):
        receipt.enqueue(order_id=2, conn=wrapped)
    assert committed(db, app, orders) == ([], [2])


def test_the_async_methods_refuse_django_connection_with_the_way_out(
    app: App, db: Any, orders: str, receipt: Task[Any, Any]
) -> None:
    with pytest.raises(TypeError, match=r"synchronous: call enqueue\(\)"):
        asyncio.run(receipt.enqueue_async(order_id=1, conn=connection))  # type: ignore[arg-type]
    assert committed(db, app, orders) == ([], [])


def test_a_django_connection_to_another_database_is_refused(receipt: Task[Any, Any]) -> None:
    with pytest.raises(ConfigurationError, match="is to sqlite, not PostgreSQL"):
        receipt.enqueue(order_id=1, conn=connections["lite"])


# -- skiplock.contrib.django, in this process (the project-level tests are in
# tests/e2e/test_django_project.py) ----------------------------------------------------------


def schema_exists(db: psycopg.Connection[Any], name: str) -> bool:
    found = db.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [name]).fetchone()
    return found is not None


def test_migrating_on_djangos_connection_is_part_of_its_transaction(
    db: psycopg.Connection[Any],
) -> None:
    """What a Django migration does: skiplock's migrations roll back with it."""
    app = App(schema=f"dj_{secrets.token_hex(5)}")
    with pytest.raises(Boom), transaction.atomic():
        assert app.sync_client.migrate(connection, up_to=2) == [1, 2]
        raise Boom
    assert not schema_exists(db, app.schema)
    try:
        with transaction.atomic():
            assert app.sync_client.migrate(connection, up_to=2) == [1, 2]
        assert schema_exists(db, app.schema)
        assert app.sync_client.migrate(connection) == [m.version for m in all_migrations()][2:]
    finally:
        app.sync_client.drop_schema(connection)


def test_the_last_django_migration_reaches_the_last_sql_migration() -> None:
    folder = Path(contrib_migrations.__file__).parent
    names = sorted(p.stem for p in folder.glob("[0-9][0-9][0-9][0-9]_*.py"))
    # The last one that runs SQL migrations (others add the unmanaged models: no SQL).
    up_to = [
        operation.up_to
        for name in names
        for operation in importlib.import_module(
            f"{contrib_migrations.__name__}.{name}"
        ).Migration.operations
        if isinstance(operation, SkiplockMigrations)
    ]
    assert up_to and up_to[-1] == all_migrations()[-1].version, (
        f"skiplock has SQL migration {all_migrations()[-1].version:04d}: add a Django migration "
        "to skiplock/contrib/django/migrations that runs it (SkiplockMigrations)"
    )


def test_a_django_app_enqueues_on_djangos_connection_by_default(
    app: App, db: psycopg.Connection[Any], orders: str
) -> None:
    django_app = DjangoApp(schema=app.schema)
    assert django_app.database == "default"
    assert conninfo_to_dict(django_app.dsn)["dbname"] == connection.settings_dict["NAME"]

    @django_app.task(name="send_receipt")
    def send_receipt(order_id: int) -> None: ...

    with pytest.raises(Boom), transaction.atomic():
        send_receipt.enqueue(order_id=insert_order(orders))
        assert_enqueued(send_receipt)  # the helpers read on Django's connection too
        raise Boom
    assert committed(db, app, orders) == ([], [])
    with transaction.atomic():
        order_id = insert_order(orders)
        django_app.enqueue("send_receipt", {"order_id": order_id})
        assert committed(db, app, orders) == ([], [])
    assert committed(db, app, orders) == ([order_id], [order_id])
    django_app.close()


def test_a_django_app_on_an_alias_of_another_engine_says_so(app: App) -> None:
    django_app = DjangoApp(schema=app.schema, database="lite")

    @django_app.task(name="send_receipt")
    def send_receipt(order_id: int) -> None: ...

    with pytest.raises(ConfigurationError, match=r"DATABASES\['lite'\] is sqlite, not PostgreSQL"):
        _ = django_app.dsn
    with pytest.raises(ConfigurationError, match="this Django connection is to sqlite"):
        send_receipt.enqueue(order_id=1)
