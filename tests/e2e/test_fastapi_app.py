"""The FastAPI applications of docs/frameworks.md (its ``# webapp.py`` block, with an
AsyncSession, and its ``# webapp_sync.py`` block, with a sync Session in ``def`` endpoints, run
as written) served by a real uvicorn process, its tasks run by a real ``skiplock worker``, on a
database of the test's own: enqueue in the request's session commits or rolls back with the
bill, the worker runs the task's SQLAlchemy code, and the mounted dashboard answers only behind
the application's own check.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from markdown_it import MarkdownIt
from psycopg import conninfo, sql

from helpers.polling import wait_for
from helpers.scratch_pg import free_port
from skiplock import App

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ADMIN_KEY = "key-of-this-test"


def webapp_source(module: str) -> str:
    """The ``# <module>.py`` block of docs/frameworks.md."""
    tokens = MarkdownIt("commonmark").parse((ROOT / "docs" / "frameworks.md").read_text())
    (source,) = [
        t.content for t in tokens if t.type == "fence" and t.content.startswith(f"# {module}.py\n")
    ]
    return source


class Served:
    def __init__(self, base: str, dsn: str, folder: Path, env: dict[str, str], module: str) -> None:
        self.module = module
        self.base = base
        self.dsn = dsn
        self.folder = folder
        self.env = env

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        req = urllib.request.Request(self.base + path, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def query(self, text: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn) as conn:
            return conn.execute(text.encode()).fetchall()


@pytest.fixture
def served(pg_dsn: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    module: str = getattr(request, "param", "webapp")  # the application's module
    name = f"fastapi_{secrets.token_hex(5)}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = database_url(pg_dsn, name)
    (tmp_path / f"{module}.py").write_text(webapp_source(module))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    env.update(
        DATABASE_URL=dsn, ADMIN_KEY=ADMIN_KEY, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), "."])
    )
    port = free_port()
    log = tmp_path / "uvicorn.log"
    server = None
    try:
        migrator = App(dsn)
        migrator.migrate()
        migrator.close()
        with log.open("wb") as out:
            server = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", f"{module}:web", "--port", str(port)],
                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        # uvicorn binds its socket after the app's startup ("Application startup complete"),
        # then says where it listens: requests before that line are refused.
        while "Uvicorn running on" not in log.read_text():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield Served(f"http://127.0.0.1:{port}", dsn, tmp_path, env, module)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(drop.format(sql.Identifier(name)))


def database_url(pg_dsn: str, dbname: str) -> str:
    """``pg_dsn``'s server as a ``postgresql://`` URL (what the application's setting holds)."""
    params = conninfo.conninfo_to_dict(pg_dsn)
    user = quote(str(params.get("user", "")), safe="")
    password = params.get("password")
    auth = f"{user}:{quote(str(password), safe='')}" if password else user
    host, port = str(params.get("host", "localhost")), params.get("port", 5432)
    if host.startswith("/"):  # a unix socket's folder (the embedded server)
        return f"postgresql://{auth}@/{dbname}?host={quote(host, safe='')}&port={port}"
    return f"postgresql://{auth}@{host}:{port}/{dbname}"


@pytest.mark.parametrize("served", ["webapp", "webapp_sync"], indirect=True)
def test_the_bill_and_its_job_commit_together_and_the_worker_sends_it(served: Served) -> None:
    status, body = served.request("POST", "/bills?total_cents=1999")
    assert status == 200, body
    bill_id = json.loads(body)["id"]
    status, body = served.request("POST", "/bills?total_cents=-5")
    assert status == 422 and "a bill must be positive" in body
    jobs = "SELECT (payload->>'bill_id')::int, status FROM skiplock.jobs ORDER BY id"
    wait_for(lambda: served.query(jobs) == [(bill_id, "pending")], 10, "the committed job")
    assert served.query("SELECT id, sent FROM bills") == [(bill_id, False)]
    worker = subprocess.run(
        [sys.executable, "-m", "skiplock", "worker", f"{served.module}:jobs", "--burst"],
        cwd=served.folder, env={**served.env, "SKIPLOCK_DATABASE_URL": served.dsn},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert worker.returncode == 0, worker.stderr
    assert served.query(jobs) == [(bill_id, "done")]
    assert served.query("SELECT id, sent FROM bills") == [(bill_id, True)]


def test_the_dashboard_answers_under_its_path_only_to_admins(served: Served) -> None:
    served.request("POST", "/bills?total_cents=1999")
    assert served.request("GET", "/admin/jobs/")[0] == 401
    assert served.request("GET", "/admin/jobs/", {"x-admin-key": "wrong"})[0] == 401
    status, page = served.request("GET", "/admin/jobs/", {"x-admin-key": ADMIN_KEY})
    assert status == 200 and "mail" in page
    status, body = served.request("GET", "/admin/jobs/api/queues", {"x-admin-key": ADMIN_KEY})
    assert status == 200 and "mail" in body
    assert served.request("GET", "/admin/jobs/api/queues")[0] == 401
