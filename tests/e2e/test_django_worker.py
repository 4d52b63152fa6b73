"""``skiplock worker`` as a real process running sync tasks that use the Django ORM.

A small Django project (settings, a model, a task module that calls ``django.setup()``) is
written to a temporary folder.  The worker looks after Django's connections as a request
does (see ``skiplock/_runtime/django_requests.py``): a connection the server dropped between
two tasks is replaced for the retry, or before the task with ``CONN_HEALTH_CHECKS``, instead of
failing every later task on that thread; with ``CONN_MAX_AGE = 0`` (Django's default) no connection
stays open after a task.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.polling import wait_for
from skiplock import App, FixedDelay

pytestmark = pytest.mark.slow

SETTINGS = """
import os

from psycopg.conninfo import conninfo_to_dict

params = dict(conninfo_to_dict(os.environ["SKIPLOCK_DATABASE_URL"]))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", ""),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "OPTIONS": {**params, "application_name": os.environ["DJANGO_APP_NAME"]},
        "CONN_MAX_AGE": None if os.environ["CONN_MAX_AGE"] == "none" else 0,
        "CONN_HEALTH_CHECKS": os.environ["CONN_HEALTH_CHECKS"] == "on",
    }
}
INSTALLED_APPS = ["djshop"]
USE_TZ = True
SECRET_KEY = "only-for-this-test"
"""
MODELS = """
import os

from django.db import models


class Receipt(models.Model):
    order_id = models.IntegerField()

    class Meta:
        managed = False
        db_table = os.environ["SCHEMA"] + '"."receipts'  # schema-qualified, quoted by Django
"""
TASKS = """
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djshop.settings")
django.setup()

from skiplock import App, FixedDelay  # noqa: E402

from djshop.models import Receipt  # noqa: E402

app = App(schema=os.environ["SCHEMA"])


@app.task(name="send_receipt", queue="mail", max_attempts=3, retry=FixedDelay(0.2))
def send_receipt(order_id: int) -> None:
    Receipt.objects.create(order_id=order_id)
"""


@pytest.fixture
def project(tmp_path: Path, app: App, db: psycopg.Connection[Any]) -> Path:
    package = tmp_path / "djshop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in (("settings", SETTINGS), ("models", MODELS), ("tasks", TASKS)):
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    db.execute(
        sql.SQL("CREATE TABLE {} (id serial PRIMARY KEY, order_id int NOT NULL)").format(
            sql.Identifier(app.schema, "receipts")
        )
    )

    @app.task(name="send_receipt", queue="mail", max_attempts=3, retry=FixedDelay(0.2))
    def send_receipt(order_id: int) -> None: ...

    return tmp_path


@pytest.fixture
def django_worker(
    project: Path, app: App, pg_dsn: str, request: pytest.FixtureRequest
) -> Iterator[Callable[[str, str], str]]:
    """Starts the worker with the given CONN_MAX_AGE / CONN_HEALTH_CHECKS; returns the
    application_name of its Django connections."""
    started: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []

    def start(max_age: str, health_checks: str) -> str:
        name = f"djshop_{app.schema}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
        env.update(
            SKIPLOCK_DATABASE_URL=pg_dsn, SCHEMA=app.schema, DJANGO_APP_NAME=name,
            CONN_MAX_AGE=max_age, CONN_HEALTH_CHECKS=health_checks, PYTHONPATH=str(project),
        )  # fmt: skip
        log = project / "worker.stderr"
        command = [sys.executable, "-m", "skiplock", "worker", "djshop.tasks:app",
                   "--concurrency", "1", "--poll-interval", "0.1"]  # fmt: skip
        with log.open("wb") as err:
            worker = subprocess.Popen(
                command, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=err
            )
        started.append(worker)
        logs.append(log)
        wait_for(lambda: "started" in log.read_text(), 20, "the worker to start")
        return name

    yield start
    for worker, log in zip(started, logs, strict=True):
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=30)
            assert code == 0, log.read_text()


def job(db: psycopg.Connection[Any], app: App, job_id: int) -> tuple[str, int]:
    query = sql.SQL("SELECT status, attempts FROM {} WHERE id = %s")
    row = db.execute(query.format(sql.Identifier(app.schema, "jobs")), [job_id]).fetchone()
    assert row is not None
    return row[0], row[1]


def run_job(db: psycopg.Connection[Any], app: App, order_id: int) -> tuple[str, int]:
    """Enqueue one job and wait until it is done or failed; its (status, attempts)."""
    job_id = app.enqueue("send_receipt", {"order_id": order_id}).id
    wait_for(lambda: job(db, app, job_id)[0] in ("done", "failed"), 20, f"job {job_id}")
    return job(db, app, job_id)


def django_backends(db: psycopg.Connection[Any], name: str) -> list[int]:
    rows = db.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [name])
    return [pid for (pid,) in rows]


def drop_django_connections(db: psycopg.Connection[Any], name: str) -> None:
    """What a server restart, a failover or a pooler's idle timeout does to them."""
    pids = django_backends(db, name)
    assert pids, "the worker kept no Django connection to drop"
    for pid in pids:
        db.execute("SELECT pg_terminate_backend(%s)", [pid])
    wait_for(lambda: not django_backends(db, name), 10, "the connections to go")


def receipts(db: psycopg.Connection[Any], app: App) -> list[int]:
    query = sql.SQL("SELECT order_id FROM {} ORDER BY id").format(
        sql.Identifier(app.schema, "receipts")
    )
    return [order_id for (order_id,) in db.execute(query)]


def test_a_dropped_persistent_connection_fails_one_attempt_and_the_retry_reconnects(
    django_worker: Callable[[str, str], str], app: App, db: psycopg.Connection[Any]
) -> None:
    name = django_worker("none", "off")
    assert run_job(db, app, 1) == ("done", 1)
    drop_django_connections(db, name)
    # Without the upkeep this job, and every later one on the thread, ends up failed.
    assert run_job(db, app, 2) == ("done", 2)
    assert run_job(db, app, 3) == ("done", 1)
    assert receipts(db, app) == [1, 2, 3]


def test_with_health_checks_a_dropped_connection_costs_no_attempt(
    django_worker: Callable[[str, str], str], app: App, db: psycopg.Connection[Any]
) -> None:
    name = django_worker("none", "on")
    assert run_job(db, app, 1) == ("done", 1)
    drop_django_connections(db, name)
    assert run_job(db, app, 2) == ("done", 1)
    assert receipts(db, app) == [1, 2]


def test_with_djangos_default_max_age_no_connection_outlives_its_task(
    django_worker: Callable[[str, str], str], app: App, db: psycopg.Connection[Any]
) -> None:
    name = django_worker("0", "off")
    assert run_job(db, app, 1) == ("done", 1)
    wait_for(lambda: not django_backends(db, name), 5, "the task's connection to be closed")
    assert run_job(db, app, 2) == ("done", 1)
    assert receipts(db, app) == [1, 2]
