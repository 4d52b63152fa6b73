"""skiplock.contrib.django in a real Django project (tests/django_project: one app, one model),
run as its users run it: ``manage.py`` processes against a database of the test's own.

- ``migrate`` on a fresh database creates skiplock's tables (and ``migrate skiplock zero`` drops
  them); ``manage.py test`` gets them on Django's test database;
- a view-like function enqueues in ``transaction.atomic()`` through ``DjangoApp`` (no ``conn``):
  the job commits or rolls back with the order;
- ``manage.py skiplock worker --burst`` (one process, or a supervisor of two) runs the ORM code
  of the task, with the database of ``DATABASES`` and the app of ``SKIPLOCK_APP``;
- tasks of Django's task framework (orders/background.py) enqueued through skiplock's backend
  run on that worker, and their results (status, return value, errors) read back in another
  process;
- the jobs admin served by ``manage.py runserver``, in Debian's chromium driven by Playwright:
  log in, filter the failed jobs, open one (read-only), retry it with the action.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from skiplock._db.migrations import all_migrations

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "django_project"


def test_the_backend_serves_the_task_framework_this_django_has() -> None:
    """Django 6 has ``django.tasks`` built in; before it, the django-tasks package serves.  CI
    runs this file on both: on Django 5.2 with the suite, and on Django 6 (Python 3.13) with
    SKIPLOCK_REQUIRE_DJANGO6 set, where an older Django fails this test instead of passing."""
    import django

    from skiplock.contrib.django import _framework

    if os.environ.get("SKIPLOCK_REQUIRE_DJANGO6"):
        assert django.VERSION >= (6,), django.__version__
    package = _framework.PACKAGE
    assert package == ("django.tasks" if django.VERSION >= (6,) else "django_tasks")
    assert issubclass(_framework.InvalidTaskError, Exception)


class Project:
    def __init__(self, folder: Path, dsn: str) -> None:
        self.folder = folder
        self.dsn = dsn
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
        self.env.pop("DATABASE_URL", None)
        self.env.pop("DJANGO_SETTINGS_MODULE", None)
        self.env["PYTHONPATH"] = str(ROOT / "src")
        self.env["SHOP_DATABASE_URL"] = dsn

    def manage(self, *args: str, expect: int = 0) -> str:
        """Run ``manage.py ARGS``; its output (stdout and stderr)."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = done.stdout + done.stderr
        assert done.returncode == expect, f"manage.py {' '.join(args)}: {done.returncode}\n{output}"
        return output

    def query(self, text: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn) as conn:
            return conn.execute(text.encode()).fetchall()


@pytest.fixture
def project(pg_dsn: str, tmp_path: Path) -> Iterator[Project]:
    """The fixture project, copied, on a new database (and its test_ twin) dropped afterwards."""
    name = f"djproj_{secrets.token_hex(5)}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    folder = tmp_path / "project"
    shutil.copytree(PROJECT, folder, ignore=shutil.ignore_patterns("__pycache__"))
    try:
        yield Project(folder, conninfo.make_conninfo(pg_dsn, dbname=name))
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            for db in (name, f"test_{name}"):
                drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                admin.execute(drop.format(sql.Identifier(db)))


def skiplock_versions(project: Project) -> list[int]:
    return [v for (v,) in project.query("SELECT version FROM skiplock.migrations ORDER BY 1")]


def test_migrate_creates_skiplocks_tables_and_zero_drops_them(project: Project) -> None:
    output = project.manage("migrate", "--noinput")
    assert "Applying skiplock.0001_initial... OK" in output
    assert skiplock_versions(project) == [m.version for m in all_migrations()]
    assert "schema skiplock is up to date" in project.manage("skiplock", "migrate")
    from_code = "from django.core.management import call_command as c; c('skiplock', 'migrate')"
    assert "schema skiplock is up to date" in project.manage("shell", "-c", from_code)
    project.manage("migrate", "skiplock", "zero", "--noinput")
    absent = project.query("SELECT 1 FROM pg_namespace WHERE nspname = 'skiplock'")
    assert absent == []
    project.manage("migrate", "--noinput")
    assert skiplock_versions(project) == [m.version for m in all_migrations()]


def test_a_schema_skiplock_migrate_made_is_taken_as_it_is(project: Project) -> None:
    project.manage("skiplock", "migrate")
    assert "Applying skiplock.0001_initial... OK" in project.manage("migrate", "--noinput")
    assert skiplock_versions(project) == [m.version for m in all_migrations()]


def test_manage_py_test_enqueues_on_the_test_database(project: Project) -> None:
    output = project.manage("test", "orders", "--noinput", "-v", "2")
    # orders/tests.py and orders/test_framework_tasks.py (the task framework, the admin)
    assert "Ran 14 tests" in output and "\nOK" in output
    assert "Applying skiplock.0001_initial... OK" in output


CHECKOUT = "from orders.views import checkout; print('order', checkout(1999).id)"
FAILED_CHECKOUT = """
from orders.views import checkout
try:
    checkout(500, fail=True)
except RuntimeError:
    print("refused")
"""


def test_the_job_commits_or_rolls_back_with_the_order_and_the_worker_runs_orm_code(
    project: Project,
) -> None:
    project.manage("migrate", "--noinput")
    assert "order 1" in project.manage("shell", "-c", CHECKOUT)
    assert "refused" in project.manage("shell", "-c", FAILED_CHECKOUT)
    assert project.query("SELECT id, receipt_sent FROM orders_order") == [(1, False)]
    jobs = "SELECT payload->>'order_id', status FROM skiplock.jobs ORDER BY id"
    assert project.query(jobs) == [("1", "pending")]
    output = project.manage("skiplock", "worker", "--burst")
    assert "done=1 " in output
    assert project.query("SELECT id, receipt_sent FROM orders_order") == [(1, True)]
    assert project.query(jobs) == [("1", "done")]
    assert "mail" in project.manage("skiplock", "status")


def test_a_supervised_worker_sets_django_up_in_its_processes(project: Project) -> None:
    project.manage("migrate", "--noinput")
    for _ in range(4):
        project.manage("shell", "-c", CHECKOUT)
    project.manage("skiplock", "worker", "--burst", "--processes", "2")
    assert project.query("SELECT count(*) FROM orders_order WHERE receipt_sent") == [(4,)]


ENQUEUE_FRAMEWORK_TASKS = """
import json
from datetime import timedelta
from django.utils import timezone
from orders import background
from orders.models import Order

order = Order.objects.create(total_cents=100)
later = timezone.now() + timedelta(hours=1)
results = {
    "mark_sent": background.mark_sent.enqueue(order.id),
    "urgent": background.urgent.enqueue(order.id),
    "refuse": background.refuse.enqueue("out of stock"),
    "add": background.add.enqueue(2, b=3),
    "whoami": background.whoami.enqueue(),
    "unstorable": background.unstorable.enqueue(),
    "later": background.mark_sent.using(run_after=later).enqueue(order.id),
    "leave": background.leave.enqueue(),
}
print(json.dumps({name: r.id for name, r in results.items()}))
"""

READ_RESULTS = """
import json, sys
from orders.framework import default_task_backend

shown = {}
for name, result_id in json.loads(sys.argv[-1]).items():
    r = default_task_backend.get_result(result_id)
    shown[name] = {
        "task": r.task.name,
        "status": r.status.value,
        "value": r.return_value if r.status == "SUCCESSFUL" else None,
        "attempts": r.attempts,
        "workers": r.worker_ids,
        "ordered": bool(r.finished_at and r.enqueued_at <= r.started_at <= r.finished_at),
        "errors": [[e.exception_class.__name__, e.traceback] for e in r.errors],
    }
print("RESULTS " + json.dumps(shown))
"""


def test_the_task_frameworks_tasks_run_on_a_skiplock_worker_with_their_results(
    project: Project,
) -> None:
    project.manage("migrate", "--noinput")
    ids = json.loads(project.manage("shell", "-c", ENQUEUE_FRAMEWORK_TASKS).splitlines()[-1])
    output = project.manage("skiplock", "worker", "--burst")
    assert "done=4 " in output and "failed=3 " in output, output
    # The framework's signals, sent in the worker (django_tasks logs them)
    found = re.search(r"worker (\S+) stopped", output)
    assert found, output
    worker_id = found.group(1)
    refused = f"Task id={ids['refuse']} path=orders.background.refuse state=FAILED"
    assert refused in output
    read = f"import sys; sys.argv.append({json.dumps(json.dumps(ids))}); " + READ_RESULTS
    line = next(
        x for x in project.manage("shell", "-c", read).splitlines() if x.startswith("RESULTS ")
    )
    results = json.loads(line.removeprefix("RESULTS "))
    assert project.query("SELECT receipt_sent FROM orders_order") == [(True,)]
    for name in ("mark_sent", "urgent", "add", "whoami"):
        assert results[name]["status"] == "SUCCESSFUL", results[name]
        assert results[name]["attempts"] == 1 and results[name]["ordered"], results[name]
        assert results[name]["workers"] == [worker_id], results[name]
        assert results[name]["errors"] == []
    assert results["mark_sent"]["value"] == 1  # rows updated by the task's ORM code
    assert results["urgent"]["value"] == 1  # the order's id, from the queue "mail"
    assert results["add"]["value"] == 5  # an async task
    assert results["whoami"]["value"] == [1, ids["whoami"], "RUNNING"]  # its TaskContext
    exception, traceback = results["refuse"]["errors"][0]
    assert results["refuse"]["status"] == "FAILED" and exception == "ValueError"
    assert traceback.startswith("Traceback (most recent call last):")
    assert traceback.endswith("ValueError: out of stock\n"), traceback
    exception, traceback = results["unstorable"]["errors"][0]
    assert exception == "TypeError" and "is not JSON serializable" in traceback
    assert results["later"]["status"] == "READY" and results["later"]["attempts"] == 0
    # SystemExit in a task fails its job (the worker went on: done=4 above)
    exception, traceback = results["leave"]["errors"][0]
    assert results["leave"]["status"] == "FAILED" and exception == "SystemExit", results["leave"]
    assert "SystemExit: leaving" in traceback


CREATE_ADMIN = """
from django.contrib.auth.models import User
from orders import background

User.objects.create_superuser("root", "root@example.com", "a-long-password")
print("JOB", background.refuse.enqueue("out of stock").id)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def chromium_or_skip() -> tuple[Any, str]:
    """Playwright's sync API and Debian's chromium (no browser is ever downloaded); skipped
    without them, failed under CI (SKIPLOCK_REQUIRE_BROWSER), as in test_dashboard_browser.py."""
    reason = None
    try:
        from playwright import sync_api
    except ImportError:
        reason = "the playwright package is not installed"
    path = next((p for p in ("/usr/bin/chromium", shutil.which("chromium")) if p), None)
    if path is None or not os.access(path, os.X_OK):
        reason = reason or "chromium is not installed"
    if reason is not None:
        if os.environ.get("SKIPLOCK_REQUIRE_BROWSER"):
            pytest.fail(f"SKIPLOCK_REQUIRE_BROWSER is set but {reason}")
        pytest.skip(reason)
    assert path is not None
    return sync_api, path


def test_the_jobs_admin_in_a_browser_retries_a_failed_job(project: Project) -> None:
    """Log in to the admin of a served project, find the failed job, retry it with the action."""
    sync_api, chromium = chromium_or_skip()
    project.manage("migrate", "--noinput")
    job_id = int(project.manage("shell", "-c", CREATE_ADMIN).split("JOB ")[1].split()[0])
    project.manage("skiplock", "worker", "--burst")
    status = f"SELECT status FROM skiplock.jobs WHERE id = {job_id}"
    assert project.query(status) == [("failed",)]
    port = free_port()
    log = (project.folder / "runserver.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=project.folder,
        env=project.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/admin/login/", timeout=2).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "no runserver"
                time.sleep(0.2)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.set_default_timeout(20_000)
                page.goto(f"{base}/admin/skiplock/job/")
                page.fill("#id_username", "root")
                page.fill("#id_password", "a-long-password")
                page.click("input[type=submit]")
                page.click("#changelist-filter a[href='?status__exact=failed']")
                row = page.locator("#result_list tbody tr", has_text="django_tasks:default")
                sync_api.expect(row).to_have_count(1)
                row.locator("th a", has_text=str(job_id)).click()
                expect = sync_api.expect
                expect(page.locator(".field-last_error")).to_contain_text("out of stock")
                expect(page.locator("input[name=_save]")).to_have_count(0)  # read-only
                page.go_back()
                page.check(f"input.action-select[value='{job_id}']")
                page.select_option("select[name=action]", "retry_jobs")
                page.click("button[name=index]")
                expect(page.locator("ul.messagelist")).to_contain_text(f"Retried: {job_id}")
            finally:
                browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    assert project.query(status) == [("pending",)]


def test_without_skiplock_app_the_check_says_so_and_other_commands_still_work(
    project: Project,
) -> None:
    settings = project.folder / "shopsite" / "settings.py"
    settings.write_text(settings.read_text().replace('SKIPLOCK_APP = "orders.tasks:app"', ""))
    assert "skiplock.E001" in project.manage("check", expect=1)
    assert "SKIPLOCK_APP" in project.manage("check", expect=1)
    project.manage("migrate", "--noinput", "--skip-checks")  # the error stops a plain migrate
    assert "schema skiplock is up to date" in project.manage("skiplock", "migrate")
