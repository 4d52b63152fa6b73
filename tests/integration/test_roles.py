"""Least-privilege roles (`skiplock roles`) against a real server.

The roles are created by the real command on the test's schema and given to LOGIN users made
for the test; a producer and real in-process workers then run as those users (the server
trusts local connections, so they log in without a password).  Everything each role may do
is used, and what it may not do is tried and refused.  Roles are cluster-wide: the fixture
drops them (DROP OWNED, DROP ROLE) whatever happens.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from helpers.dashboard_client import Browser, serving
from helpers.polling import comes_true_async
from helpers.role_logins import KINDS, Roles, drop_roles, role_logins, run_cli
from skiplock import App, CancelledJobs, FixedDelay, RetriedJobs, Retry, SkiplockError, Worker
from skiplock._cli.roles import RoleNames
from skiplock._doctor.command import Doctor, Thresholds


@pytest.fixture
def roles(pg_dsn: str, schema: str, db: psycopg.Connection[Any]) -> Iterator[Roles]:
    with role_logins(db, pg_dsn, schema) as made:
        yield made


def register(app: App, state: dict[str, int]) -> None:
    """The same tasks for the producer's and the workers' apps."""

    @app.task(name="quick")
    def quick(n: int, card: str = "") -> None:
        state["quick"] = state.get("quick", 0) + 1

    @app.task(name="flaky", retry=FixedDelay(0.2))
    def flaky() -> None:
        state["flaky"] = state.get("flaky", 0) + 1
        if state["flaky"] == 1:
            raise RuntimeError("first attempt fails")

    @app.task(name="snoozer")
    async def snoozer() -> None:
        state["snoozer"] = state.get("snoozer", 0) + 1
        if state["snoozer"] == 1:
            raise Retry(0.1)

    @app.task(name="slow")
    async def slow() -> None:
        await asyncio.sleep(30)

    @app.task(name="limited", queue="limited")
    async def limited(n: int) -> None:
        await asyncio.sleep(0.05)

    @app.task(name="held_one", queue="held", model="held")
    async def held_one() -> None: ...


def statuses(db: psycopg.Connection[Any], schema: str) -> dict[int, str]:
    rows = db.execute(sql.SQL("SELECT id, status FROM {}").format(sql.Identifier(schema, "jobs")))
    return dict(rows.fetchall())


def test_producer_and_workers_run_under_their_roles(
    roles: Roles, schema: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="skiplock")
    state: dict[str, int] = {}
    producer = App(roles.dsn["enqueuer"], schema)
    admin = App(roles.dsn["admin"], schema)
    worker_app = App(roles.dsn["worker"], schema)
    held_app = App(roles.dsn["worker"], schema, completion="archive")
    for application in (producer, admin, worker_app, held_app):
        register(application, state)

    try:
        # Producer: single, many, idempotent, in its own transaction, delayed, async.
        ids = [producer.enqueue("quick", {"n": 1}).id]
        ids += [e.id for e in producer.enqueue_many("quick", [{"n": i} for i in range(2, 12)])]
        first = producer.enqueue("quick", {"n": 99}, idempotency_key="once")
        again = producer.enqueue("quick", {"n": 99}, idempotency_key="once")
        assert again.deduplicated and again.id == first.id and not first.deduplicated
        ids.append(first.id)
        with psycopg.connect(roles.dsn["enqueuer"]) as conn:
            ids.append(producer.enqueue("quick", {"n": 100}, conn=conn).id)
            conn.commit()
        ids.append(producer.enqueue("quick", {"n": 101}, delay=0.3).id)
        ids.append(asyncio.run(producer.enqueue_async("quick", {"n": 102})).id)
        ids.append(producer.enqueue("quick", {"n": 103}, entity_key="customer-7").id)
        ids.append(producer.enqueue("quick", {"n": 104}, meta={"trace": "00-ab-01"}).id)
        flaky_id = producer.enqueue("flaky").id
        snoozer_id = producer.enqueue("snoozer").id
        limited_ids = [e.id for e in producer.enqueue_many("limited", [{"n": i} for i in range(4)])]
        slow_id = producer.enqueue("slow").id
        held_id = producer.enqueue("held_one").id
        # A held-lock job of a limited key: its claim locks one of the key's slots (0028).
        held_keyed_id = producer.enqueue("held_one", limit_key="tenant").id

        # Admin: a cluster-wide limit on one queue (claims then take the advisory lock), and a
        # rate limit the worker role's claims spend.
        admin.sync_client.set_concurrency_limit("limited", 1)
        admin.sync_client.set_rate_limit("limited", 1000, 1.0)
        admin.sync_client.set_key_limit("tenant", concurrency=1, rate=1000, period=1.0)
        admin.sync_client.set_aging("default", 60)  # the leader ages as the worker role

        async def drive() -> Worker:
            worker = Worker(
                worker_app,
                queues=["default", "limited"],
                concurrency=5,
                poll_interval=0.2,
                lease_seconds=1.5,
                leader_ttl=0.6,
            )
            running = asyncio.create_task(worker.run())
            deadline = time.monotonic() + 30
            requested = False
            wanted = set(ids + limited_ids + [flaky_id, snoozer_id])
            while time.monotonic() < deadline:
                now = statuses(db, schema)
                if not requested and now.get(slow_id) == "running":
                    assert admin.sync_client.cancel_or_request(slow_id) == "requested"
                    requested = True
                finished = all(now.get(i) == "done" for i in wanted)
                if finished and now.get(slow_id) == "cancelled":
                    break
                if running.done():
                    break
                await asyncio.sleep(0.1)
            worker.stop()
            await running
            return worker

        async def drive_held() -> Worker:
            """A worker of the held-lock model, archiving what it finishes."""
            worker = Worker(held_app, queues=["held"], poll_interval=0.2, leader_ttl=0.6)
            running = asyncio.create_task(worker.run())
            await comes_true_async(
                lambda: not {held_id, held_keyed_id} & set(statuses(db, schema)), 10, step=0.05
            )
            worker.stop()
            await running
            return worker

        worker = asyncio.run(drive())
        held_stats = asyncio.run(drive_held()).stats
    finally:
        for application in (producer, admin, worker_app, held_app):
            application.close()

    now = statuses(db, schema)
    assert all(now[i] == "done" for i in ids + limited_ids), now
    spent = db.execute(
        sql.SQL("SELECT rate_tokens < 1000 FROM {} WHERE name = 'limited'").format(
            sql.Identifier(schema, "queues")
        )
    ).fetchone()
    assert spent == (True,), "the worker role's claims did not spend the rate budget"
    assert now[flaky_id] == "done" and state["flaky"] == 2  # failed once, retried, done
    assert now[snoozer_id] == "done" and state["snoozer"] == 2
    assert now[slow_id] == "cancelled"
    assert held_id not in now and held_keyed_id not in now  # moved to the archive
    assert held_stats.done == 2
    archived = db.execute(
        sql.SQL("SELECT status FROM {} WHERE id = %s").format(
            sql.Identifier(schema, "jobs_archive")
        ),
        [held_id],
    ).fetchone()
    assert archived == ("done",)
    viewer = App(roles.dsn["viewer"], schema)  # the charts count it from the archive's write
    try:
        charted = viewer.sync_client.finished_per_minute().queues["held"]
        assert sum(m.done for m in charted) == held_stats.done
    finally:
        viewer.close()

    assert worker.stats.failed == 0 and worker.stats.lost == 0
    assert worker.stats.retried == 1 and worker.stats.snoozed == 1 and worker.stats.cancelled == 1
    assert worker.maintenance is not None
    maintenance = worker.maintenance.stats
    assert maintenance.errors == 0
    assert maintenance.promoted >= 2  # the delayed job and the flaky job's retry
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, problems
    assert not [r for r in caplog.records if "permission denied" in r.getMessage()]


def test_periodic_ticks_under_the_worker_role(
    roles: Roles, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="skiplock")
    ticks: list[float] = []
    worker_app = App(roles.dsn["worker"], schema)

    @worker_app.periodic(every=0.5, name="tick")
    def tick() -> None:
        ticks.append(time.monotonic())

    async def drive() -> Worker:
        worker = Worker(worker_app, poll_interval=0.2, leader_ttl=0.6)
        running = asyncio.create_task(worker.run())
        await comes_true_async(lambda: ticks or running.done(), 5, step=0.1)
        worker.stop()
        await running
        return worker

    try:
        worker = asyncio.run(drive())
    finally:
        worker_app.close()
    assert worker.maintenance is not None
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, problems[:3]
    assert worker.maintenance.stats.periodic_enqueued >= 1 and ticks


def test_enqueuer_cannot_change_delete_or_read_jobs(
    roles: Roles, schema: str, db: psycopg.Connection[Any]
) -> None:
    state: dict[str, int] = {}
    producer = App(roles.dsn["enqueuer"], schema)
    register(producer, state)
    try:
        job_id = producer.enqueue("quick", {"n": 1, "card": "4111-1111"}).id
        # Reads the status of the job it depends on; writes an expiry.
        after = producer.enqueue("quick", {"n": 2}, depends_on=[job_id], expires=60).id
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            producer.get_job(job_id)  # reads the payload
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            producer.sync_client.set_paused("default", True)
    finally:
        producer.close()

    jobs = sql.Identifier(schema, "jobs")
    refused = [
        sql.SQL("UPDATE {} SET priority = 1").format(jobs),
        sql.SQL("UPDATE {} SET status = 'done' WHERE id = 1").format(jobs),
        sql.SQL("DELETE FROM {}").format(jobs),
        sql.SQL("SELECT payload FROM {}").format(jobs),
        sql.SQL("SELECT * FROM {}").format(jobs),
        sql.SQL("SELECT last_error, locked_by FROM {}").format(jobs),
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, attempts) VALUES ('q', 't', '{{}}', 9)"
        ).format(jobs),
        sql.SQL("TRUNCATE {}").format(jobs),
        sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, "queues")),
        sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, "jobs_archive")),
        sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, "leaders")),
        sql.SQL("CREATE TABLE {} (n int)").format(sql.Identifier(schema, "mine")),
    ]
    with psycopg.connect(roles.dsn["enqueuer"], autocommit=True) as conn:
        for statement in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        # What it may read: the columns the insert returns and the idempotency lookup needs.
        row = conn.execute(
            sql.SQL("SELECT id, queue, status, idempotency_key FROM {} WHERE id = %s").format(jobs),
            [job_id],
        ).fetchone()
        assert row == (job_id, "default", "pending", None)
    payload = db.execute(sql.SQL("SELECT payload FROM {} ORDER BY id").format(jobs)).fetchone()
    assert payload == ({"n": 1, "card": "4111-1111"},)  # untouched
    waiting = db.execute(sql.SQL("SELECT status FROM {} WHERE id = %s").format(jobs), [after])
    assert waiting.fetchone() == ("waiting",)


def test_worker_cannot_run_ddl_or_change_queue_settings(
    roles: Roles, schema: str, db: psycopg.Connection[Any]
) -> None:
    t = {name: sql.Identifier(schema, name) for name in ("jobs", "queues", "jobs_archive")}
    refused = [
        sql.SQL("CREATE TABLE {} (n int)").format(sql.Identifier(schema, "mine")),
        sql.SQL("CREATE TABLE public.{} (n int)").format(sql.Identifier(f"w_{schema}")),
        sql.SQL("ALTER TABLE {} ADD COLUMN extra int").format(t["jobs"]),
        sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(t["jobs"]),
        sql.SQL("CREATE INDEX ON {} (task)").format(t["jobs"]),
        sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, "jobs_claim_idx")),
        sql.SQL("DROP TABLE {}").format(t["jobs"]),
        sql.SQL("TRUNCATE {}").format(t["jobs"]),
        sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)),
        sql.SQL("INSERT INTO {} (name, paused) VALUES ('default', true)").format(t["queues"]),
        sql.SQL("UPDATE {} SET paused = true").format(t["queues"]),
        sql.SQL("UPDATE {} SET rate_limit = 1000000, rate_period = 1").format(t["queues"]),
        # DELETE on the archive is granted (its retention, migration 0022); UPDATE is not.
        sql.SQL("UPDATE {} SET status = 'x'").format(t["jobs_archive"]),
        sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(f"w_{schema}")),
    ]
    with psycopg.connect(roles.dsn["worker"], autocommit=True) as conn:
        for statement in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    worker_app = App(roles.dsn["worker"], schema)
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker_app.sync_client.set_paused("default", True)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker_app.sync_client.set_rate_limit("default", 1000)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker_app.sync_client.set_aging("default", 60)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker_app.sync_client.drop_schema()
    finally:
        worker_app.close()
    tables = db.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", [schema]
    ).fetchone()
    assert tables == (15,)  # no table of its own: the 15 of the migrations


def test_admin_manages_jobs_and_queues_and_doctor_sees_everything(
    roles: Roles, schema: str, db: psycopg.Connection[Any]
) -> None:
    state: dict[str, int] = {}
    admin = App(roles.dsn["admin"], schema)
    register(admin, state)
    jobs = sql.Identifier(schema, "jobs")
    try:
        a, b = (admin.enqueue("quick", {"n": n}).id for n in (1, 2))
        db.execute(
            sql.SQL("UPDATE {} SET status = 'failed', finished_at = now() WHERE id = %s").format(
                jobs
            ),
            [a],
        )
        job = admin.get_job(a)
        assert job is not None and job.payload == {"n": 1}
        assert admin.retry_job(a) is True
        assert admin.cancel_job(b) is True
        assert admin.retry_jobs(statuses=["cancelled"]) == RetriedJobs(1)
        assert admin.cancel_jobs(queue="default", running=True) == CancelledJobs(2)
        admin.sync_client.set_paused("default", True)
        admin.sync_client.set_concurrency_limit("default", 3)
        assert {r["queue"] for r in admin.sync_client.queue_status()} == {"default"}
        assert len(admin.sync_client.list_jobs(limit=10)) == 2
        assert admin.sync_client.prune({"cancelled": 0.0}) == {"cancelled": 2}
        with psycopg.connect(roles.dsn["admin"], autocommit=True) as conn:
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(schema, "jobs_archive")))
            for statement in (
                sql.SQL("CREATE TABLE {} (n int)").format(sql.Identifier(schema, "mine")),
                sql.SQL("ALTER TABLE {} ADD COLUMN extra int").format(jobs),
                sql.SQL("DROP TABLE {}").format(jobs),
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
    finally:
        admin.close()

    # Doctor as admin: every check runs, and pg_monitor shows other users' transactions.
    with psycopg.connect(db.info.dsn) as other:
        other.execute("SELECT txid_current()")
        time.sleep(0.6)
        found = Doctor(roles.dsn["admin"], schema, Thresholds(transaction_seconds=0.3)).run()
        by_check = {f.check: f for f in found}
        assert "visibility" not in by_check
        assert not [f for f in found if f.message.startswith("cannot check")], found
        assert by_check["schema"].status == "ok"
        pids = [s["pid"] for s in by_check["xmin_horizon"].details["sessions"]]
        assert other.info.backend_pid in pids
        other.rollback()


def test_viewer_reads_everything_and_changes_nothing(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    owner = App(pg_dsn, schema)
    register(owner, {})
    viewer = App(roles.dsn["viewer"], schema)
    register(viewer, {})
    try:
        failed, pending = (owner.enqueue("quick", {"n": n}).id for n in (1, 2))
        db.execute(
            sql.SQL("UPDATE {} SET status = 'failed', finished_at = now() WHERE id = %s").format(
                sql.Identifier(schema, "jobs")
            ),
            [failed],
        )
        owner.sync_client.set_paused("default", True)
        job = viewer.get_job(failed)
        assert job is not None and job.payload == {"n": 1}
        assert [j.id for j in viewer.sync_client.list_jobs()] == [pending, failed]
        assert viewer.sync_client.queue_status()[0]["paused"] is True
        assert viewer.sync_client.pending_migrations() == []
        assert viewer.sync_client.list_workers() == []
        for change in (
            lambda: viewer.retry_job(failed),
            lambda: viewer.cancel_job(pending),
            lambda: viewer.sync_client.set_paused("default", False),
            lambda: viewer.enqueue("quick", {"n": 3}),
            lambda: viewer.sync_client.prune({"failed": 0.0}),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                change()

        # The dashboard as the viewer: read-only pages work; with actions on, the database
        # refuses them and the dashboard says so.
        for read_only in (True, False):
            shown = App(roles.dsn["viewer"], schema)  # the dashboard closes its app's pool
            register(shown, {})
            with serving(shown, read_only=read_only) as base:
                browser = Browser(base)
                assert browser.log_in().status == 200
                page = browser.get(f"/jobs/{failed}")
                assert page.status == 200 and "quick" in page.text
                if not read_only:
                    refused = browser.post(f"/jobs/{failed}/retry", {"csrf": page.csrf()})
                    assert refused.status == 403, refused
                    assert "the database user may not do this" in refused.text
        assert statuses(db, schema) == {failed: "failed", pending: "pending"}
    finally:
        viewer.close()
        owner.close()


def privileges(db: psycopg.Connection[Any], role: str) -> set[tuple[str, ...]]:
    """Every table and column privilege ``role`` holds directly."""
    tables = db.execute(
        "SELECT table_schema, table_name, privilege_type FROM information_schema.table_privileges "
        "WHERE grantee = %s",
        [role],
    ).fetchall()
    columns = db.execute(
        "SELECT table_schema, table_name, column_name, privilege_type "
        "FROM information_schema.column_privileges WHERE grantee = %s",
        [role],
    ).fetchall()
    schema_usage = db.execute(
        "SELECT n.nspname, 'USAGE' FROM pg_namespace AS n "
        "WHERE has_schema_privilege(%s, n.oid, 'USAGE') AND n.nspname LIKE 't\\_%%'",
        [role],
    ).fetchall()
    return {tuple(r) for r in tables + columns + schema_usage}


def test_grants_are_exact_and_reapplying_restores_them(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    names = roles.names
    before = {kind: privileges(db, getattr(names, kind)) for kind in KINDS}
    enqueuer_tables = {p[1:] for p in before["enqueuer"] if len(p) == 3}
    dependencies = ("job_dependencies", "INSERT")
    assert enqueuer_tables in (
        {("jobs", "INSERT"), ("jobs", "SELECT"), dependencies},
        {dependencies},
    )
    enqueuer_columns = {(p[2], p[3]) for p in before["enqueuer"] if len(p) == 4}
    assert ("payload", "INSERT") in enqueuer_columns
    assert ("payload", "SELECT") not in enqueuer_columns
    assert ("attempts", "INSERT") not in enqueuer_columns
    assert {c for c, p in enqueuer_columns if p == "SELECT"} == {
        "id", "queue", "status", "idempotency_key",
    }  # fmt: skip
    worker_tables = {(p[1], p[2]) for p in before["worker"] if len(p) == 3}
    assert ("queues", "SELECT") in worker_tables and ("queues", "UPDATE") not in worker_tables
    assert not [p for p in worker_tables if p[1] in ("TRUNCATE", "TRIGGER", "REFERENCES")]
    member = db.execute("SELECT pg_has_role(%s, 'pg_monitor', 'MEMBER')", [names.admin])
    assert member.fetchone() == (True,)

    # Extra privileges given by hand are taken back by a second run, which creates nothing.
    db.execute(
        sql.SQL("GRANT UPDATE ON {} TO {}").format(
            sql.Identifier(schema, "queues"), sql.Identifier(names.worker)
        )
    )
    db.execute(
        sql.SQL("GRANT SELECT (payload) ON {} TO {}").format(
            sql.Identifier(schema, "jobs"), sql.Identifier(names.enqueuer)
        )
    )
    result = run_cli("roles", "--dsn", pg_dsn, "--schema", schema)
    assert result.returncode == 0 and "created none (all existed)" in result.stdout
    after = {kind: privileges(db, getattr(names, kind)) for kind in KINDS}
    assert after == before


def test_printed_script_gives_the_same_privileges(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    suffix = secrets.token_hex(3)
    custom = RoleNames(*(f"dba_{kind}_{suffix}" for kind in KINDS))
    # --sql never connects: an unreachable DSN does not matter.
    printed = run_cli(
        "roles", "--sql", "--dsn", "postgresql://nobody@127.0.0.1:1/none", "--schema", schema,
        "--enqueuer", custom.enqueuer, "--worker", custom.worker, "--admin", custom.admin,
        "--viewer", custom.viewer,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    script = printed.stdout
    creates = [line for line in script.splitlines() if line.startswith("CREATE ROLE")]
    assert len(creates) == 4 and "BEGIN;" in script and "COMMIT;" in script
    psql = shutil.which("psql")
    try:
        if psql:
            first = subprocess.run(
                [psql, pg_dsn, "-v", "ON_ERROR_STOP=1", "-q", "-f", "-"],
                input=script, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert first.returncode == 0, first.stderr
            # Again: the CREATE ROLE lines fail harmlessly, the grants run.
            second = subprocess.run(
                [psql, pg_dsn, "-q", "-f", "-"],
                input=script, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert second.returncode == 0
            assert second.stderr.count("already exists") == 4, second.stderr
            assert "ROLLBACK" not in second.stdout + second.stderr
        else:
            db.execute(script)
        for kind in KINDS:
            applied = privileges(db, getattr(roles.names, kind))
            printed_privileges = privileges(db, getattr(custom, kind))
            assert printed_privileges == applied, kind
    finally:
        drop_roles(db, custom.all())


def test_roles_refuses_bad_names_and_unprivileged_installers(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    for args in (
        ["--schema", 'x"; DROP TABLE y; --'],
        ["--schema", schema, "--worker", 'w"; DROP TABLE y; --'],
        ["--schema", schema, "--admin", "pg_monitor"],
        ["--schema", schema, "--enqueuer", "same", "--worker", "same"],
        # The name of the jobs table's permissive policy: an enqueuer of that name would
        # replace it with its restrictive one, and no login but the owner would see a job.
        ["--schema", schema, "--enqueuer", "skiplock_any_row"],
    ):
        result = run_cli("roles", "--sql", *args)
        assert result.returncode == 1, (args, result.stdout)
        assert result.stderr.startswith("error: "), result.stderr
        assert result.stdout == ""
    # Applying as a user that does not own the tables: a clear refusal, nothing changed.
    before = privileges(db, roles.names.worker)
    result = run_cli("roles", "--dsn", roles.dsn["enqueuer"], "--schema", schema)
    assert result.returncode == 1
    assert "does not own the tables" in result.stderr and "--sql" in result.stderr
    assert privileges(db, roles.names.worker) == before
    missing = run_cli("roles", "--dsn", pg_dsn, "--schema", f"none_{secrets.token_hex(3)}")
    assert missing.returncode == 1 and "skiplock migrate" in missing.stderr
    with pytest.raises(SkiplockError):
        RoleNames.for_schema(schema, worker="Has-Capitals")


def test_the_roles_themselves_cannot_log_in(roles: Roles) -> None:
    for kind in KINDS:
        role = getattr(roles.names, kind)
        with pytest.raises(psycopg.OperationalError, match="not permitted to log in"):
            psycopg.connect(conninfo.make_conninfo(roles.dsn[kind], user=role))
