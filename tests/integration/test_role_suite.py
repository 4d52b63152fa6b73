"""The role suite: log in as each role of `skiplock roles` and try what a hostile producer or a
stolen login would, against a real server (issue 41).

What must hold: the enqueuer inserts only claimable rows and links dependencies only to the
jobs it inserts; no role leaves a running job without a lease; the roles of one database give
nothing in another; and a worker run beside every attempt finishes every good job.  Each
attempt is made by the login user of one role (see role_logins.py), never by the owner.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from helpers.polling import comes_true_async
from helpers.role_logins import KINDS, Roles, drop_roles, login_users, role_logins, run_cli
from skiplock import App, Worker
from skiplock._cli.roles import RoleNames
from skiplock._db.migrations import all_migrations
from skiplock._db.sql import Queries
from skiplock._doctor.command import Doctor

REFUSED = (psycopg.errors.InsufficientPrivilege, psycopg.errors.CheckViolation)


@pytest.fixture
def roles(pg_dsn: str, schema: str, db: psycopg.Connection[Any]) -> Iterator[Roles]:
    with role_logins(db, pg_dsn, schema) as made:
        yield made


def table(schema: str, name: str = "jobs") -> sql.Identifier:
    return sql.Identifier(schema, name)


def statuses(db: psycopg.Connection[Any], schema: str) -> dict[int, str]:
    rows = db.execute(sql.SQL("SELECT id, status FROM {}").format(table(schema)))
    return dict(rows.fetchall())


def register(app: App, ran: list[str]) -> None:
    @app.task(name="quick")
    def quick(n: int = 0, **fields: object) -> None:
        ran.append("quick")

    @app.task(name="limited", queue="limited")
    def limited(n: int = 0) -> None:
        ran.append("limited")


def run_worker_until(app: App, done: Callable[[], bool], timeout: float = 20.0) -> Worker:
    """A worker (with maintenance: reclaims, releases) on both queues until ``done()``."""

    async def drive() -> Worker:
        worker = Worker(
            app, queues=["default", "limited"], poll_interval=0.1, lease_seconds=2, leader_ttl=0.5
        )
        running = asyncio.create_task(worker.run())
        await comes_true_async(lambda: done() or running.done(), timeout, step=0.1)
        worker.stop()
        await running
        return worker

    return asyncio.run(drive())


def attempt(dsn: str, statement: sql.Composable, params: Any = None) -> str:
    """Run one statement as a login user: 'ok', or the name of the error that refused it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(statement, params)
        except psycopg.Error as exc:
            return type(exc).__name__
    return "ok"


def test_enqueuer_inserts_only_claimable_rows_and_others_jobs_still_run(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """Finding 3: a running row without a lease, inserted as the enqueuer, was never
    reclaimed; it held its entity key and the one slot of a limited queue forever."""
    ran: list[str] = []
    owner = App(pg_dsn, schema)
    register(owner, ran)
    worker_app = App(roles.dsn["worker"], schema)
    register(worker_app, ran)
    jobs = table(schema)
    try:
        owner.sync_client.set_concurrency_limit("limited", 1)
        outcome = {}
        for status in ("running", "done", "failed", "cancelled"):
            outcome[status] = attempt(
                roles.dsn["enqueuer"],
                sql.SQL(
                    "INSERT INTO {} (queue, task, payload, status, entity_key) "
                    "VALUES ('limited', 'limited', '{{}}', %s, 'customer-1')"
                ).format(jobs),
                [status],
            )
        good = [owner.enqueue("limited", {"n": n}, entity_key="customer-1").id for n in range(3)]
        good += [owner.enqueue("quick", {"n": n}, entity_key="customer-1").id for n in range(2)]
        run_worker_until(
            worker_app, lambda: all(statuses(db, schema).get(i) == "done" for i in good)
        )
        found = {f.check: f for f in Doctor(roles.dsn["admin"], schema).run()}
    finally:
        owner.close()
        worker_app.close()
    now = statuses(db, schema)
    assert [now[i] for i in good] == ["done"] * 5, now
    assert outcome == dict.fromkeys(outcome, "InsufficientPrivilege"), outcome
    assert found["impossible_states"].status == "ok", found["impossible_states"]


def test_enqueuer_cannot_link_another_users_job_to_a_failed_one(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """Finding 3: an enqueuer that inserted into job_dependencies made the maintenance leader
    cancel another user's waiting job (ids are readable)."""
    ran: list[str] = []
    victim = App(pg_dsn, schema)
    register(victim, ran)
    producer = App(roles.dsn["enqueuer"], schema)
    register(producer, ran)
    worker_app = App(roles.dsn["worker"], schema)
    register(worker_app, ran)
    deps = table(schema, "job_dependencies")
    insert = sql.SQL("INSERT INTO {} (job_id, depends_on) VALUES (%s, %s)").format(deps)
    try:
        first = victim.enqueue("quick", {"n": 1}).id
        waiting = victim.enqueue("quick", {"n": 2}, depends_on=[first]).id
        broken = victim.enqueue("quick", {"n": 3}).id
        assert victim.cancel_job(broken)
        tried = {"direct": attempt(roles.dsn["enqueuer"], insert, [waiting, broken])}
        # In the transaction of its own dependent job, which it may link.
        with psycopg.connect(roles.dsn["enqueuer"]) as conn:
            mine = producer.enqueue("quick", {"n": 4}, depends_on=[first], conn=conn).id
            try:
                conn.execute(insert, [waiting, broken])
                tried["beside its own"] = "ok"
            except psycopg.Error as exc:
                tried["beside its own"] = type(exc).__name__
            conn.rollback()
        # A job it enqueued earlier is not its to link either, nor by an update.
        earlier = producer.enqueue("quick", {"n": 5}, depends_on=[first]).id
        tried["its earlier job"] = attempt(roles.dsn["enqueuer"], insert, [earlier, broken])
        tried["worker, direct"] = attempt(roles.dsn["worker"], insert, [waiting, broken])
        tried["update"] = attempt(
            roles.dsn["worker"],
            sql.SQL("UPDATE {} SET depends_on = %s WHERE job_id = %s").format(deps),
            [broken, waiting],
        )
        run_worker_until(
            worker_app,
            lambda: all(statuses(db, schema).get(i) == "done" for i in (first, waiting, earlier)),
        )
    finally:
        victim.close()
        producer.close()
        worker_app.close()
    now = statuses(db, schema)
    assert (now[first], now[waiting], now[earlier]) == ("done", "done", "done"), now
    assert tried == dict.fromkeys(tried, "InsufficientPrivilege"), tried
    assert mine not in now  # rolled back with the attempt


def test_no_role_leaves_a_running_job_without_a_lease(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    jobs = table(schema)
    owner = App(pg_dsn, schema)
    register(owner, [])
    try:
        job_id = owner.enqueue("quick").id
    finally:
        owner.close()
    no_lease = sql.SQL(
        "UPDATE {} SET status = 'running', locked_by = 'w', locked_at = now() WHERE id = %s"
    ).format(jobs)
    insert = sql.SQL(
        "INSERT INTO {} (queue, task, payload, status) VALUES ('default', 'quick', '{{}}', "
        "'running')"
    ).format(jobs)
    outcome = {kind: attempt(roles.dsn[kind], no_lease, [job_id]) for kind in KINDS}
    outcome["owner"] = attempt(pg_dsn, no_lease, [job_id])
    outcome["owner insert"] = attempt(pg_dsn, insert)
    assert outcome == {
        "enqueuer": "InsufficientPrivilege",
        "worker": "CheckViolation",
        "admin": "CheckViolation",
        "viewer": "InsufficientPrivilege",
        "owner": "CheckViolation",
        "owner insert": "CheckViolation",
    }
    assert statuses(db, schema) == {job_id: "pending"}


def test_a_running_job_without_a_lease_from_before_the_migration_is_reclaimed(
    pg_dsn: str, db: psycopg.Connection[Any]
) -> None:
    """A schema migrated before the lease became required may hold such rows: the migration
    gives them a lease that ends at once, and the maintenance leader requeues them."""
    schema = f"t_{secrets.token_hex(5)}"
    queries = Queries(schema)
    migrations = all_migrations()
    required = next(
        m for m in migrations if "jobs_running_has_lease" in m.text and "ADD CONSTRAINT" in m.text
    )
    app = App(pg_dsn, schema)
    ran: list[str] = []
    register(app, ran)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction():
            conn.execute(queries["migration_prepare"])
            for m in migrations:
                if m.version >= required.version:
                    break
                conn.execute(m.statement(schema))
                conn.execute(
                    sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(
                        table(schema, "migrations")
                    ),
                    [m.version, m.name],
                )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (queue, task, payload, status, entity_key) "
                    "VALUES ('default', 'quick', '{{}}', 'running', 'k')"
                ).format(table(schema))
            )
        app.migrate()
        (job_id,) = statuses(db, schema)
        worker = run_worker_until(app, lambda: statuses(db, schema)[job_id] == "done")
        row = db.execute(
            sql.SQL("SELECT status, attempts FROM {} WHERE id = %s").format(table(schema)),
            [job_id],
        ).fetchone()
    finally:
        app.sync_client.drop_schema()
        app.close()
    assert row == ("done", 1) and ran == ["quick"]
    assert worker.maintenance is not None and worker.maintenance.stats.reclaimed >= 1


def test_doctor_reports_rows_in_impossible_states(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    jobs = table(schema)
    owner = App(pg_dsn, schema)
    register(owner, [])
    try:
        ids = [owner.enqueue("quick", {"n": n}).id for n in range(3)]
    finally:
        owner.close()
    assert {f.check: f for f in Doctor(roles.dsn["admin"], schema).run()}[
        "impossible_states"
    ].status == "ok"
    # What only the owner could write, by hand, and with the constraint dropped.
    db.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT jobs_running_has_lease").format(jobs))
    db.execute(sql.SQL("UPDATE {} SET status = 'running' WHERE id = %s").format(jobs), [ids[0]])
    db.execute(sql.SQL("UPDATE {} SET status = 'done' WHERE id = ANY(%s)").format(jobs), [ids[1:]])
    found = {f.check: f for f in Doctor(roles.dsn["admin"], schema).run()}["impossible_states"]
    assert found.status == "fail", found
    assert "1 running job(s) without a lease" in found.message
    assert "2 finished job(s) without a finish time" in found.message
    assert ids[0] in found.details["running_without_lease"]
    assert "SET locked_until = now()" in found.fix and "SET finished_at = now()" in found.fix


def test_roles_of_one_database_give_nothing_in_another(
    pg_dsn: str, db: psycopg.Connection[Any]
) -> None:
    """Finding 5: role names are cluster-wide.  `skiplock roles` for the same schema on a second
    database reused the first one's roles ("created none (all existed)"), so a worker login of
    tenant A could read and delete tenant B's jobs.  Now it refuses and says why."""
    schema = f"t_{secrets.token_hex(5)}"
    # Tenant B's database is made here: the test's own may be any one, ``postgres`` included
    # (the embedded server's).
    other_db = f"skiplock_tenant_{secrets.token_hex(4)}"
    db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(other_db)))
    other_dsn = conninfo.make_conninfo(pg_dsn, dbname=other_db)
    tenant_a, tenant_b = App(pg_dsn, schema), App(other_dsn, schema)
    names = RoleNames.for_schema(schema)
    users: list[str] = []
    try:
        for tenant in (tenant_a, tenant_b):
            tenant.migrate()
            register(tenant, [])
        b_job = tenant_b.enqueue("quick", {"secret": "tenant b"}).id
        first = run_cli("roles", "--dsn", pg_dsn, "--schema", schema)
        assert first.returncode == 0, first.stderr
        dsns, users = login_users(db, pg_dsn, names)
        second = run_cli("roles", "--dsn", other_dsn, "--schema", schema)
        # The DBA's script, run on tenant B's database, stops before it grants anything.
        printed = run_cli("roles", "--sql", "--schema", schema)
        script = subprocess.run(
            ["psql", other_dsn, "-q", "-f", "-"],
            input=printed.stdout, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        # Each login of tenant A, on tenant B's database.
        reach = {}
        for kind in KINDS:
            on_b = conninfo.make_conninfo(dsns[kind], dbname=other_db)
            reach[kind] = [
                attempt(on_b, sql.SQL(move).format(table(schema)))
                for move in ("SELECT id FROM {}", "DELETE FROM {}")
            ]
        with psycopg.connect(other_dsn, autocommit=True) as other:
            kept = other.execute(sql.SQL("SELECT id FROM {}").format(table(schema))).fetchall()
    finally:
        with psycopg.connect(other_dsn, autocommit=True) as other:
            drop_roles_in(other, names.all())
        drop_roles(db, users + names.all())
        for tenant in (tenant_a, tenant_b):
            tenant.sync_client.drop_schema()
            tenant.close()
        db.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(other_db)))
    assert second.returncode == 1, second.stdout
    assert "already have privileges in another database" in second.stderr, second.stderr
    assert "--enqueuer" in second.stderr and "created" not in second.stdout
    first_db = conninfo.conninfo_to_dict(pg_dsn).get("dbname")
    assert f"already has privileges in database {first_db}" in script.stderr, script.stderr
    assert reach == {kind: ["InsufficientPrivilege"] * 2 for kind in KINDS}
    assert kept == [(b_job,)]


def drop_roles_in(conn: psycopg.Connection[Any], names: list[str]) -> None:
    """Take back what the roles were given in another database (DROP OWNED is per database)."""
    for name in names:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name]).fetchone():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))


def attempt_and_undo(dsn: str, statement: sql.Composable, params: Any = None) -> str:
    """Run one statement as a login user and roll it back: 'ok', or the error's name."""
    with psycopg.connect(dsn) as conn:
        try:
            conn.execute(statement, params)
        except psycopg.Error as exc:
            return type(exc).__name__
        finally:
            conn.rollback()
    return "ok"


OK, NO, CHECK = "ok", "InsufficientPrivilege", "CheckViolation"


def test_each_role_tries_what_a_hostile_login_would(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """Every role's login tries every move of the issue's list; each is undone after (so the
    next starts from the same rows), and the owner's rows are unchanged at the end."""
    owner = App(pg_dsn, schema)
    register(owner, [])
    try:
        victim = owner.enqueue("quick", {"card": "4111-1111"}).id
        waiting = owner.enqueue("quick", depends_on=[victim]).id
        broken = owner.enqueue("quick").id
        assert owner.cancel_job(broken)
    finally:
        owner.close()
    before = db.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(table(schema))).fetchall()
    t = {name: table(schema, name) for name in ("jobs", "job_dependencies", "queues")}
    archive = table(schema, "jobs_archive")
    moves: dict[str, tuple[sql.Composable, Any, dict[str, str]]] = {
        "insert a claimable job": (
            sql.SQL("INSERT INTO {} (queue, task, payload) VALUES ('default', 'quick', '{{}}')"),
            None,
            {"enqueuer": OK, "worker": OK, "admin": OK, "viewer": NO},
        ),
        "insert a running job without a lease": (
            sql.SQL(
                "INSERT INTO {} (queue, task, payload, status) VALUES ('d', 't', '{{}}', 'running')"
            ),
            None,
            {"enqueuer": NO, "worker": CHECK, "admin": CHECK, "viewer": NO},
        ),
        "insert a finished job": (
            sql.SQL(
                "INSERT INTO {} (queue, task, payload, status) VALUES ('d', 't', '{{}}', 'done')"
            ),
            None,
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": NO},
        ),
        "read payloads": (
            sql.SQL("SELECT payload FROM {}"),
            None,
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": OK},
        ),
        "read errors, owners and row versions": (
            sql.SQL("SELECT last_error, locked_by, xmin FROM {}"),
            None,
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": OK},
        ),
        "read ids, queues and statuses": (
            sql.SQL("SELECT id, queue, status, idempotency_key FROM {}"),
            None,
            {"enqueuer": OK, "worker": OK, "admin": OK, "viewer": OK},
        ),
        "update another user's job": (
            sql.SQL("UPDATE {} SET priority = -100 WHERE id = %s"),
            [victim],
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": NO},
        ),
        "mark another user's job running without a lease": (
            sql.SQL("UPDATE {} SET status = 'running' WHERE id = %s"),
            [victim],
            {"enqueuer": NO, "worker": CHECK, "admin": CHECK, "viewer": NO},
        ),
        "delete another user's job": (
            sql.SQL("DELETE FROM {} WHERE id = %s"),
            [victim],
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": NO},
        ),
        "hold row locks on pending jobs, which claims skip": (
            sql.SQL("SELECT id FROM {} FOR KEY SHARE"),
            None,
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": NO},
        ),
        "lock the jobs table against claims": (
            sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE"),
            None,
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": NO},
        ),
        "switch row-level security off": (
            sql.SQL("ALTER TABLE {} DISABLE ROW LEVEL SECURITY"),
            None,
            dict.fromkeys(KINDS, NO),
        ),
        "drop the enqueuer's policy": (
            sql.SQL("DROP POLICY {policy} ON {}"),
            None,
            dict.fromkeys(KINDS, NO),
        ),
        "drop the lease constraint": (
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT jobs_running_has_lease"),
            None,
            dict.fromkeys(KINDS, NO),
        ),
    }
    outcomes: dict[str, dict[str, str]] = {}
    expected: dict[str, dict[str, str]] = {}
    for move, (statement, params, allowed) in moves.items():
        composed = statement.format(t["jobs"], policy=sql.Identifier(roles.names.enqueuer))
        outcomes[move] = {k: attempt_and_undo(roles.dsn[k], composed, params) for k in KINDS}
        expected[move] = allowed
    other_moves: dict[str, tuple[sql.Composable, Any, dict[str, str]]] = {
        "make another user's waiting job depend on a cancelled one": (
            sql.SQL("INSERT INTO {} (job_id, depends_on) VALUES (%s, %s)").format(
                t["job_dependencies"]
            ),
            [waiting, broken],
            {"enqueuer": NO, "worker": NO, "admin": NO, "viewer": NO},
        ),
        "make another user's waiting job wait for a cancelled one instead": (
            sql.SQL("UPDATE {} SET depends_on = %s WHERE job_id = %s").format(
                t["job_dependencies"]
            ),
            [broken, waiting],
            dict.fromkeys(KINDS, NO),
        ),
        "read what jobs wait for": (
            sql.SQL("SELECT * FROM {}").format(t["job_dependencies"]),
            None,
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": OK},
        ),
        "forget what a job waits for": (
            sql.SQL("DELETE FROM {}").format(t["job_dependencies"]),
            None,
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": NO},
        ),
        "pause a queue": (
            sql.SQL("INSERT INTO {} (name, paused) VALUES ('default', true)").format(t["queues"]),
            None,
            {"enqueuer": NO, "worker": NO, "admin": OK, "viewer": NO},
        ),
        "burn job ids": (
            sql.SQL("SELECT nextval('{}')").format(sql.Identifier(schema, "jobs_id_seq")),
            None,
            dict.fromkeys(KINDS, NO),
        ),
        "read archived payloads": (
            sql.SQL("SELECT payload FROM {}").format(archive),
            None,
            {"enqueuer": NO, "worker": OK, "admin": OK, "viewer": OK},
        ),
    }
    for move, (statement, params, allowed) in other_moves.items():
        outcomes[move] = {k: attempt_and_undo(roles.dsn[k], statement, params) for k in KINDS}
        expected[move] = allowed
    assert outcomes == expected
    # The owner may not link another transaction's job either.
    linked = attempt_and_undo(
        pg_dsn,
        sql.SQL("INSERT INTO {} (job_id, depends_on) VALUES (%s, %s)").format(
            t["job_dependencies"]
        ),
        [waiting, broken],
    )
    assert linked == NO
    after = db.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(table(schema))).fetchall()
    assert after == before


def test_enqueuer_links_its_own_jobs_in_any_transaction(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """The dependency check knows the transaction's own rows however it was opened: in a
    savepoint, after other writes, in repeatable read, in autocommit."""
    producer = App(roles.dsn["enqueuer"], schema)
    register(producer, [])
    ids = []
    try:
        first = producer.enqueue("quick").id
        ids.append(producer.enqueue("quick", depends_on=[first]).id)
        with psycopg.connect(roles.dsn["enqueuer"]) as conn:
            producer.enqueue("quick", conn=conn)  # the transaction's id comes first
            with conn.transaction():  # a savepoint: the job's row has a later id
                ids.append(producer.enqueue("quick", depends_on=[first], conn=conn).id)
            conn.commit()
        with psycopg.connect(roles.dsn["enqueuer"]) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.execute("SELECT 1")  # the snapshot is taken before the job's id is given
            ids.append(producer.enqueue("quick", depends_on=[first], conn=conn).id)
            conn.commit()
        ids.append(producer.enqueue_many("quick", [{}, {}], depends_on=[first])[1].id)
    finally:
        producer.close()
    waits = db.execute(
        sql.SQL("SELECT job_id, depends_on FROM {} ORDER BY job_id").format(
            table(schema, "job_dependencies")
        )
    ).fetchall()
    assert [j for j, _ in waits if j in ids] == ids and all(d == first for _, d in waits)
    now = statuses(db, schema)
    assert all(now[i] == "waiting" for i in ids), now


def test_row_level_security_leaves_the_workers_plans_alone(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """The permissive policy lets every row through for the worker: its claims, reclaims and
    finishes are planned exactly as for the table's owner (whom row-level security skips)."""
    jobs = table(schema)
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, entity_key) SELECT 'default', 'quick', '{{}}', "
            "CASE WHEN g % 3 = 0 THEN 'k' || g END FROM generate_series(1, 5000) AS g"
        ).format(jobs)
    )
    db.execute(sql.SQL("ANALYZE {}").format(jobs))
    queries = Queries(schema)
    params = {
        "queue": "default", "queues": ["default"], "after_priority": None, "after_run_at": None,
        "after_id": None, "limit": 10, "commit_async": True, "held_marker": False,
        "schema": schema, "worker": "w", "lease_seconds": 30, "ids": [1], "attempts": [1],
        "claim_time_index": [1], "claim_times": ["2030-01-01"], "now": None,
    }  # fmt: skip
    plans: dict[str, list[str]] = {}
    for who, dsn in (("owner", pg_dsn), ("worker", roles.dsn["worker"])):
        with psycopg.connect(dsn) as conn:
            for name in ("job_claim", "job_reclaim_expired", "job_complete_many"):
                explained = conn.execute(sql.SQL("EXPLAIN ") + queries[name], params)
                plans[f"{who} {name}"] = [row[0] for row in explained]
            conn.rollback()
    for name in ("job_claim", "job_reclaim_expired", "job_complete_many"):
        assert plans[f"worker {name}"] == plans[f"owner {name}"], name


def test_roles_gives_up_on_a_busy_jobs_table_without_changing_anything(
    roles: Roles, pg_dsn: str, schema: str
) -> None:
    """Turning row-level security on locks the jobs table: behind a long transaction (a
    held-lock job) `skiplock roles` gives up after a few seconds instead of queueing every
    claim behind its lock."""
    with psycopg.connect(pg_dsn) as busy:
        busy.execute(sql.SQL("UPDATE {} SET priority = 0").format(table(schema)))
        result = run_cli("roles", "--dsn", pg_dsn, "--schema", schema)  # 60 s at most
        busy.rollback()
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "stayed locked" in result.stderr and "nothing was changed" in result.stderr


def test_a_second_apps_enqueuer_role_leaves_the_first_one_restricted(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    suffix = secrets.token_hex(3)
    second = RoleNames(*(f"app2_{kind}_{suffix}" for kind in KINDS))
    running = sql.SQL(
        "INSERT INTO {} (queue, task, payload, status) VALUES ('d', 't', '{{}}', 'running')"
    ).format(table(schema))
    users: list[str] = []
    try:
        result = run_cli(
            "roles", "--dsn", pg_dsn, "--schema", schema, "--enqueuer", second.enqueuer,
            "--worker", second.worker, "--admin", second.admin, "--viewer", second.viewer,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        dsns, users = login_users(db, pg_dsn, second)
        outcome = [attempt(dsn, running) for dsn in (roles.dsn["enqueuer"], dsns["enqueuer"])]
    finally:
        drop_roles(db, users + second.all())
    assert outcome == ["InsufficientPrivilege", "InsufficientPrivilege"]
    assert statuses(db, schema) == {}


def test_a_login_granted_by_hand_sees_every_row_as_before(
    roles: Roles, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """Row-level security, turned on by `skiplock roles`, hides nothing from logins that are
    not the enqueuer: a reporting user given SELECT and UPDATE by hand reads and changes
    every row."""
    owner = App(pg_dsn, schema)
    register(owner, [])
    try:
        ids = [owner.enqueue("quick", {"n": n}).id for n in range(3)]
    finally:
        owner.close()
    user = f"report_{secrets.token_hex(4)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(user)))
    try:
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
            sql.Identifier(schema), sql.Identifier(user)))  # fmt: skip
        db.execute(sql.SQL("GRANT SELECT, UPDATE ON {} TO {}").format(
            table(schema), sql.Identifier(user)))  # fmt: skip
        with psycopg.connect(conninfo.make_conninfo(pg_dsn, user=user), autocommit=True) as c:
            seen = [r[0] for r in c.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(
                table(schema)))]  # fmt: skip
            changed = c.execute(
                sql.SQL("UPDATE {} SET priority = 5").format(table(schema))
            ).rowcount
    finally:
        drop_roles(db, [user])
    assert seen == ids and changed == 3
