"""Hostile input against a real server and real workers: names built to inject SQL, rows
written by someone who may insert jobs but not run code, a NOTIFY flood from an unprivileged
role, oversized payloads, and secrets that must stay out of error text and logs.

(The plainer bad-input cases, one clear error each, are in test_bad_input.py.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from skiplock import App, InvalidName, InvalidPayload, JobStatus, UnknownTask, Worker
from skiplock._cli.roles import RoleNames
from skiplock._doctor.command import Doctor

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/test"
INJECTIONS = [
    "q'; DROP TABLE canary; --",
    'q"; DROP TABLE canary; --',
    'q"); DROP TABLE canary; --',
    "canary; DELETE FROM canary",
    "q' || pg_sleep(5) || '",
    "x\n-- \nDROP TABLE canary",
    "$$; DROP TABLE canary; $$",
]


@pytest.fixture
def canary(db: psycopg.Connection[Any], schema: str) -> Iterator[sql.Identifier]:
    """A table of three rows in the test's schema that nothing may touch."""
    table = sql.Identifier(schema, "canary")
    db.execute(sql.SQL("CREATE TABLE {} (n int)").format(table))
    db.execute(sql.SQL("INSERT INTO {} VALUES (1), (2), (3)").format(table))
    yield table


def canary_rows(db: psycopg.Connection[Any], table: sql.Identifier) -> int:
    return int(db.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0])  # type: ignore[index]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def jobs_table(schema: str) -> sql.Identifier:
    return sql.Identifier(schema, "jobs")


def insert_raw(db: psycopg.Connection[Any], schema: str, task: str, payload: str) -> int:
    """A job row as anyone with INSERT on the table may write it, bypassing the client."""
    row = db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, max_attempts) "
            "VALUES ('default', %s, %s::jsonb, 1) RETURNING id"
        ).format(jobs_table(schema)),
        [task, payload],
    ).fetchone()
    assert row is not None
    return int(row[0])


# -- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", INJECTIONS)
def test_injected_names_are_refused_everywhere(
    app: App, db: psycopg.Connection[Any], canary: sql.Identifier, name: str
) -> None:
    @app.task(name="safe")
    def safe() -> None: ...

    for attempt in (
        lambda: app.task(name=name)(lambda: None),
        lambda: app.task(name="other", queue=name)(lambda: None),
        lambda: safe.with_options(queue=name).enqueue(),
        lambda: Worker(app, queues=[name]),
        lambda: App(app.dsn, name),
        lambda: App(UNREACHABLE, name.lower()),  # refused before any connection
        lambda: App(app.dsn, app.schema, default_queue=name),
        lambda: Doctor(app.dsn, name),
        lambda: RoleNames.for_schema(app.schema, worker=name),
        lambda: RoleNames.for_schema(name),
    ):
        with pytest.raises(InvalidName):
            attempt()
    with pytest.raises(UnknownTask):  # task names are looked up, never used as SQL
        app.enqueue(name, {})
    assert db.execute(
        sql.SQL("SELECT count(*) FROM {}").format(jobs_table(app.schema))
    ).fetchone() == (0,)
    assert canary_rows(db, canary) == 3


def test_a_schema_name_with_a_quote_is_refused_before_any_sql(
    db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    bad = 'evil"; DROP SCHEMA public CASCADE; --'
    (tmp_path / "hostile_app.py").write_text(
        "from skiplock import App\napp = App(schema='fine')\n"
        "@app.task(name='t')\ndef t() -> None: ...\n"
    )
    # The DSN points nowhere: had any of these tried to connect, the error would say so.
    for command in (
        ["migrate", "--schema", bad],
        ["status", "--schema", bad],
        ["doctor", "--schema", bad],
        ["roles", "--schema", bad],
        ["enqueue", "--raw", "t", "--queue", "q", "--schema", bad],
        ["worker", "hostile_app:app", "--queues", bad],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "skiplock", *command, "--dsn", UNREACHABLE],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert result.returncode == 1, (command, result.stderr)
        assert result.stderr.startswith("error: invalid "), (command, result.stderr)
        assert "cannot connect" not in result.stderr
    printed = run_cli("migrate", "--sql", "--schema", bad)
    assert printed.returncode == 1 and printed.stdout == ""
    found = db.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'evil%'")
    assert found.fetchone() == (0,)


def test_odd_but_valid_queue_names_are_quoted_end_to_end(app: App, db: Any) -> None:
    """Names with '.', ':' and '-' are legal: they travel as bound values and a NOTIFY payload."""
    ran: list[str] = []
    queue = "billing.v2:eu-west-1"

    @app.task(name="ns.sub:task-1", queue=queue)
    def task(marker: str) -> None:
        ran.append(marker)

    task.enqueue(marker="one")
    stats = asyncio.run(Worker(app, queues=[queue], burst=True).run())
    assert stats.done == 1 and ran == ["one"]


def test_hostile_values_are_bound_never_spliced(
    app: App, db: psycopg.Connection[Any], canary: sql.Identifier
) -> None:
    @app.task(name="store")
    def store(**kwargs: Any) -> None: ...

    for value in INJECTIONS:
        store.with_options(entity_key=value, idempotency_key=value).enqueue(text=value)
    app.sync_client.set_paused(INJECTIONS[0], True)  # admin input: a bound value too
    app.sync_client.set_concurrency_limit(INJECTIONS[1], 2)
    rows = db.execute(
        sql.SQL("SELECT entity_key, idempotency_key, payload->>'text' FROM {} ORDER BY id").format(
            jobs_table(app.schema)
        )
    ).fetchall()
    assert rows == [(v, v, v) for v in INJECTIONS]
    queues = db.execute(
        sql.SQL("SELECT name FROM {} ORDER BY name").format(sql.Identifier(app.schema, "queues"))
    ).fetchall()
    assert sorted(q for (q,) in queues) == sorted(INJECTIONS[:2])
    assert canary_rows(db, canary) == 3


# -- rows written by someone else ----------------------------------------------------------


def test_rows_naming_importable_functions_are_never_imported(
    app: App, db: psycopg.Connection[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Whoever may INSERT decides which registered task runs, with what JSON; nothing else:
    a task name is a key in the app's registry, never a module path to import or call."""
    marker = tmp_path / "pwned"
    received: list[dict[str, Any]] = []

    @app.task(name="echo")
    def echo(**kwargs: Any) -> None:
        received.append(kwargs)

    command = f"touch {marker}"
    hostile = {
        "os.system": json.dumps({"command": command}),
        "os:system": json.dumps({"command": command}),
        "subprocess.run": json.dumps({"args": ["touch", str(marker)]}),
        "builtins.eval": json.dumps({"source": f"open('{marker}', 'w')"}),
        "__import__": json.dumps({"name": "os"}),
        "echo.__globals__": "{}",
    }
    ids = {task: insert_raw(db, app.schema, task, payload) for task, payload in hostile.items()}
    # jsonpickle-style and pickle-looking payloads for a real task arrive as plain data.
    pickled = {
        "py/object": "os.system",
        "py/reduce": [{"py/function": "os.system"}, {"py/tuple": [command]}],
        "__reduce__": "cos\nsystem\n(S'touch'\ntR.",
    }
    echo_id = insert_raw(db, app.schema, "echo", json.dumps(pickled))
    caplog.set_level(logging.INFO, logger="skiplock")
    stats = asyncio.run(Worker(app, burst=True).run())

    assert not marker.exists()
    assert stats.done == 1 and stats.failed == len(hostile)
    assert received == [pickled]
    for task, job_id in ids.items():
        job = app.get_job(job_id)
        assert job is not None and job.status == JobStatus.FAILED
        assert job.last_error is not None
        assert job.last_error.startswith(f"UnknownTask: unknown task {task!r}: register it")
        assert "(1 task registered, e.g. echo)" in job.last_error
    finished = app.get_job(echo_id)
    assert finished is not None and finished.status == JobStatus.DONE


@pytest.mark.parametrize("payload", ["null", "[1, 2]", '"text"', "42", "true"])
def test_a_payload_that_is_not_an_object_fails_the_job_and_the_worker_lives(
    app: App, db: psycopg.Connection[Any], payload: str
) -> None:
    @app.task(name="takes_kwargs")
    def takes_kwargs(**kwargs: Any) -> None: ...

    bad = insert_raw(db, app.schema, "takes_kwargs", payload)
    good = takes_kwargs.enqueue(ok=True).id
    stats = asyncio.run(Worker(app, burst=True).run())
    assert (stats.failed, stats.done) == (1, 1)
    job = app.get_job(bad)
    assert job is not None and job.status == JobStatus.FAILED and job.last_error is not None
    assert f"payload of job {bad} is not a JSON object" in job.last_error
    done = app.get_job(good)
    assert done is not None and done.status == JobStatus.DONE


def test_unknown_task_fails_clearly_and_the_worker_keeps_going(
    app: App, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []

    @app.task(name="real")
    def real(n: int) -> None:
        ran.append(n)

    first = real.enqueue(n=1).id
    unknown = insert_raw(db, app.schema, "renamed_in_the_last_deploy", "{}")
    last = real.enqueue(n=2).id
    stats = asyncio.run(Worker(app, burst=True, concurrency=1).run())
    assert sorted(ran) == [1, 2] and stats.done == 2 and stats.failed == 1
    job = app.get_job(unknown)
    assert job is not None and job.status == JobStatus.FAILED and job.last_error is not None
    assert job.last_error.startswith(
        "UnknownTask: unknown task 'renamed_in_the_last_deploy': register it with "
        "@app.task(name='renamed_in_the_last_deploy')"
    )
    assert {app.get_job(i).status for i in (first, last)} == {JobStatus.DONE}  # type: ignore[union-attr]


# -- payload size --------------------------------------------------------------------------


def test_oversized_payloads_are_rejected_before_insert(
    pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    limited = App(pg_dsn, schema, max_payload_bytes=1024)
    default = App(pg_dsn, schema)
    try:
        for application in (limited, default):

            @application.task(name="blob")
            def blob(s: str) -> None: ...

        # Measured in UTF-8 bytes of the JSON: {"s":"..."} is 8 bytes plus the text.
        limited.enqueue("blob", {"s": "é" * 508})  # 8 + 1016 = 1024 bytes: fits
        with pytest.raises(InvalidPayload) as info:
            limited.enqueue("blob", {"s": "é" * 509})
        assert "is 1026 bytes, over the limit of 1024 bytes" in str(info.value)
        assert "max_payload_bytes" in str(info.value)
        with pytest.raises(InvalidPayload):
            limited.enqueue_many("blob", [{"s": "a"}, {"s": "a" * 5000}])
        with pytest.raises(InvalidPayload, match="over the limit of 1048576 bytes"):
            default.enqueue("blob", {"s": "x" * (1024 * 1024)})
    finally:
        limited.close()
        default.close()
    assert db.execute(sql.SQL("SELECT count(*) FROM {}").format(jobs_table(schema))).fetchone() == (
        1,
    )


# -- NOTIFY flood --------------------------------------------------------------------------


@pytest.fixture
def flooder(pg_dsn: str, db: psycopg.Connection[Any]) -> Iterator[str]:
    """A LOGIN role with no privilege at all: NOTIFY needs none."""
    name = f"flooder_{secrets.token_hex(4)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        yield conninfo.make_conninfo(pg_dsn, user=name)
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def flood(dsn: str, channel: str, payload: str, count: int, done: list[float]) -> None:
    """``count`` notifications, each in its own transaction (one per transaction would be
    folded into one otherwise), as fast as one connection sends them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.monotonic()
        for _ in range(count):
            conn.execute("SELECT pg_notify(%s, %s)", [channel, payload])
        done.append(time.monotonic() - started)


def test_notify_flood_from_another_role_keeps_claims_bounded(app: App, flooder: str) -> None:
    @app.task(name="work", queue="flooded")
    def work() -> None: ...

    notifications = 20_000

    async def scenario() -> dict[str, float]:
        worker = Worker(app, poll_interval=1.0)
        original = worker.store.job_claim
        claims = 0

        async def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal claims
            claims += 1
            return await original(*args, **kwargs)

        worker.store.job_claim = counting  # type: ignore[method-assign]
        running = asyncio.create_task(worker.run())
        while worker.listener is None or not worker.listener.listening.is_set():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)

        async def flood_in_thread(payload: str, count: int) -> tuple[float, int, float]:
            before = claims
            done: list[float] = []
            thread = threading.Thread(
                target=flood, args=(flooder, app.queries.channel, payload, count, done)
            )
            thread.start()
            job_latency = -1.0
            if payload == "flooded":
                await asyncio.sleep(1.0)  # mid-flood: a real job must still run promptly
                enqueued = time.monotonic()
                job_id = (await app.enqueue_async("work")).id
                while time.monotonic() - enqueued < 10:
                    job = await app.get_job_async(job_id)
                    if job is not None and job.status == JobStatus.DONE:
                        job_latency = time.monotonic() - enqueued
                        break
                    await asyncio.sleep(0.02)
            while thread.is_alive():
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # the last ones delivered
            return done[0], claims - before, job_latency

        # Notifications naming no queue of this worker must not wake it at all.
        junk_seconds, junk_claims, _ = await flood_in_thread("x" * 7000, 5_000)
        seconds, flood_claims, latency = await flood_in_thread("flooded", notifications)
        alive = not running.done()
        worker.stop()
        stats = await running
        return {
            "junk_seconds": junk_seconds,
            "junk_claims": junk_claims,
            "seconds": seconds,
            "claims": flood_claims,
            "latency": latency,
            "alive": alive,
            "done": stats.done,
        }

    r = asyncio.run(scenario())
    report = (
        f"{notifications} notifications in {r['seconds']:.1f}s -> {r['claims']:.0f} claims "
        f"({r['claims'] / r['seconds']:.0f}/s); job ran {r['latency']:.2f}s after enqueue; "
        f"junk: {r['junk_claims']:.0f} claims in {r['junk_seconds']:.1f}s"
    )
    print(report)
    assert r["alive"] and r["done"] == 1, report
    assert 0 <= r["latency"] < 2.0, report  # responsive: far under the 10 s give-up
    # Junk payloads wake nobody: only the 1 s poll claims.
    assert r["junk_claims"] <= r["junk_seconds"] / 1.0 + 3, report
    # A flood of real wake-ups is coalesced: claims stay far below the notifications, at a
    # rate a database shrugs off (an empty claim is an index probe, but not free).
    assert r["claims"] < notifications / 10, report
    assert r["claims"] / r["seconds"] < 300, report


# -- secrets -------------------------------------------------------------------------------


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def skiplock_log() -> Iterator[Capture]:
    handler = Capture()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("skiplock")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def test_secret_payload_fields_stay_out_of_errors_logs_and_notifications(
    app: App, db: psycopg.Connection[Any], skiplock_log: Capture
) -> None:
    assert "secret" in App.task.__code__.co_varnames  # the lead's @app.task(secret=[...])
    password = f"hunter2-{secrets.token_hex(6)}"
    pin = 98765431

    @app.task(name="login", secret=["password", "pin"], max_attempts=1)
    def login(user: str, password: str, pin: int) -> None:
        attempt = f"{user}:{password}"  # a local holding the secret, too
        try:
            raise ConnectionError(f"upstream refused {attempt} with pin {pin}")
        except ConnectionError as exc:
            raise RuntimeError(f"login failed for {user} using {password!s}") from exc

    with psycopg.connect(app.dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(app.queries.channel)))
        listener.execute(  # marked idle, as a waiting worker's listener is: notified
            app.queries["channel_idle_hold"],
            {"channel": app.queries.channel, "queues": ["default"]},
        )
        job_id = login.enqueue(user="alice", password=password, pin=pin).id
        stats = asyncio.run(Worker(app, burst=True, listen=False).run())
        notes = [n.payload for n in listener.notifies(timeout=0.5)]

    assert stats.failed == 1
    job = app.get_job(job_id)
    assert job is not None and job.last_error is not None
    assert job.payload["password"] == password  # the payload itself is the job's input
    error = job.last_error
    assert "login failed for alice using ***" in error
    assert "upstream refused alice:*** with pin ***" in error  # the chained cause too
    assert password not in error and str(pin) not in error
    logged = "\n".join(skiplock_log.lines)
    assert "event=finished" in logged and "***" in logged
    assert password not in logged and str(pin) not in logged
    assert notes and set(notes) <= {"default"}  # NOTIFY carries the queue name only


def test_secret_values_are_redacted_in_their_escaped_forms(
    app: App, db: psycopg.Connection[Any], skiplock_log: Capture
) -> None:
    """Errors often show a value through repr() or JSON (validation errors, HTTP clients):
    a secret with a quote or a backslash then appears escaped, and must still be hidden."""
    password = f'it\'s "{secrets.token_hex(4)}" \\ secret'

    @app.task(name="connect", secret=["password"], max_attempts=1)
    def connect(host: str, password: str) -> None:
        raise ValueError(
            f"bad credentials {(host, password)!r}; request body "
            f"{json.dumps({'host': host, 'password': password})}"
        )

    job_id = connect.enqueue(host="db1", password=password).id
    asyncio.run(Worker(app, burst=True).run())
    job = app.get_job(job_id)
    assert job is not None and job.status == JobStatus.FAILED and job.last_error is not None
    escaped = {
        "raw": password,
        "repr": repr(password)[1:-1],
        "json": json.dumps(password)[1:-1],
    }
    logged = "\n".join(skiplock_log.lines)
    leaks = {form: text for form, text in escaped.items() if text in job.last_error}
    leaks.update({f"log {form}": text for form, text in escaped.items() if text in logged})
    assert not leaks, f"secret visible in {sorted(leaks)}: {job.last_error.splitlines()[0]}"
