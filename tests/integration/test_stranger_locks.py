"""Locks that someone else can take must not stall claims (issue 41, findings 4 and 8).

A *stranger* is a login with nothing but CONNECT on the database: it can take any advisory
lock.  Each test takes a lock skiplock used to wait on or count, from a second connection, and
checks that claims neither wait on it nor miscount.  Every claim connection has a generous
statement_timeout, so a claim that waits fails the test instead of hanging it.  Held-lock jobs
with an entity key are the other case: their ``running`` row is not committed, so a claim of the
same key must learn that it runs without waiting on the unique index.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from helpers.polling import comes_true_async
from helpers.role_logins import bare_login, role_logins
from helpers.stores import AsyncStore, SyncStore, sync_store
from skiplock import App, Worker
from skiplock._db.migrations import all_migrations
from skiplock._db.records import LimitedClaim, ProgressReport, QueueLimits
from skiplock._doctor.command import Doctor, Thresholds
from skiplock.errors import QueueLockBusy

WAIT_GUARD_MS = 5000  # a claim that waits this long fails (it must not wait at all)


@pytest.fixture
def stranger(pg_dsn: str, db: Any) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit session of a new login role that has no privilege but CONNECT."""
    with bare_login(db, pg_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def connect(app: App) -> psycopg.Connection[Any]:
    """A claim connection that gives up on any statement after WAIT_GUARD_MS."""
    return psycopg.connect(
        app.dsn, autocommit=True, options=f"-c statement_timeout={WAIT_GUARD_MS}"
    )


def enqueue(app: App, queue: str, n: int, entity_key: str | None = None) -> list[int]:
    """``n`` due jobs of ``queue`` (in claim order), inserted as a non-Python producer would."""
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "INSERT INTO {} (queue, task, payload, entity_key)"
                " SELECT %s, 't', '{{}}', %s FROM generate_series(1, %s) ORDER BY 1 RETURNING id"
            ).format(sql.Identifier(app.schema, "jobs")),
            [queue, entity_key, n],
        ).fetchall()
    return sorted(row[0] for row in rows)


# -- finding 4: advisory locks a stranger can take -------------------------------------


def test_a_strangers_advisory_lock_on_a_limited_queue_does_not_stall_its_claims(
    app: App, store: SyncStore, stranger: psycopg.Connection[Any]
) -> None:
    """The per-queue claim lock of a limited queue was a blocking advisory lock on a key anyone
    could compute: a stranger holding it stopped every claim of the queue (and the worker's
    whole claim loop with it)."""
    ids = enqueue(app, "lim", 3)
    app.sync_client.set_concurrency_limit("lim", 5)
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock.queue'), hashtext(%s))", [f"{app.schema}/lim"]
    )
    with connect(app) as conn:
        jobs = store.job_claim_limited(
            conn, LimitedClaim("lim", QueueLimits(5, False), "w", 30.0, want=10)
        )
    assert sorted(j.id for j in jobs) == ids


def test_a_queue_lock_held_by_a_careless_session_delays_only_its_queue(
    app: App, store: SyncStore, db: Any
) -> None:
    """A session that may lock the queue's settings row (an admin's open transaction) delays
    that queue's claims by a bounded wait, reported as QueueLockBusy, and nothing else."""
    enqueue(app, "lim", 2)
    app.sync_client.set_concurrency_limit("lim", 5)
    with psycopg.connect(app.dsn) as admin, connect(app) as conn:
        admin.execute(
            sql.SQL("SELECT * FROM {} WHERE name = 'lim' FOR UPDATE").format(
                sql.Identifier(app.schema, "queues")
            )
        )
        with pytest.raises(QueueLockBusy) as busy:
            store.job_claim_limited(
                conn, LimitedClaim("lim", QueueLimits(5, False), "w", 30.0, want=10)
            )
        assert busy.value.queue == "lim"
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        admin.rollback()
        assert (
            len(
                store.job_claim_limited(
                    conn, LimitedClaim("lim", QueueLimits(5, False), "w", 30.0, want=10)
                )
            )
            == 2
        )


def test_a_strangers_shared_lock_on_the_held_marker_does_not_fill_a_queue(
    app: App, store: SyncStore, stranger: psycopg.Connection[Any], db: Any
) -> None:
    """Running held-lock jobs were counted by the shared advisory locks on their queue's marker
    key, whoever held them: a stranger's made a queue with a limit of 1 look full."""
    enqueue(app, "lim", 2)
    app.sync_client.set_concurrency_limit("lim", 1)
    stranger.execute(
        "SELECT pg_advisory_lock_shared(hashtext('skiplock_held_job'), hashtext(%s))",
        [f"{app.schema}/lim"],
    )
    status = {row["queue"]: row for row in app.sync_client.queue_status()}
    assert status["lim"]["running"] == 0 and status["lim"]["pending"] == 2
    with connect(app) as conn:
        assert (
            len(
                store.job_claim_limited(
                    conn, LimitedClaim("lim", QueueLimits(1, False), "w", 30.0, want=10)
                )
            )
            == 1
        )
    with connect(app) as conn, connect(app) as guard:
        assert (
            store.job_claim_held_limited(
                conn, guard, LimitedClaim("lim", QueueLimits(2, False), "w", 30.0)
            )
            is not None
        )
        conn.rollback()


def test_a_strangers_lock_on_a_jobs_held_marker_does_not_hide_the_job(
    app: App, store: SyncStore, stranger: psycopg.Connection[Any]
) -> None:
    """A held-lock claim took a shared lock keyed by the low 32 bits of its job's id and gave
    the job up when it could not: a stranger's exclusive lock on that key made held-lock
    workers pass the job over for as long as it was held (and every id 2**32 apart too)."""
    first = enqueue(app, "q", 2)[0]
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext(%s), %s::bigint::bit(32)::int)",
        [f"skiplock_held_job_id/{app.schema}", first],
    )
    with connect(app) as conn:
        job = store.job_claim_held(conn, ["q"], "w", 30.0)
        assert job is not None and job.id == first
        conn.rollback()
    with connect(app) as conn:  # across several queues: the claim by id
        job = store.job_claim_held(conn, ["q", "other"], "w", 30.0)
        assert job is not None and job.id == first
        conn.rollback()
    # Nor does the stranger's lock make the pending job look running.
    shown = app.sync_client.get_job(first)
    assert shown is not None and shown.status == "pending"


# -- finding 8: held-lock jobs with an entity key --------------------------------------


def test_a_second_held_claim_skips_a_key_whose_held_job_runs(app: App, store: SyncStore) -> None:
    """The running held-lock job's row is not committed as running, so the next claim of the
    same key waited on the unique index of running keys until that job's transaction ended,
    while a job without a key sat pending."""
    keyed = enqueue(app, "q", 2, entity_key="k")
    (free,) = enqueue(app, "q", 1)
    with connect(app) as first, connect(app) as second:
        job = store.job_claim_held(first, ["q"], "w1", 30.0)
        assert job is not None and job.id == keyed[0]
        other = store.job_claim_held(second, ["q"], "w2", 30.0)
        assert other is not None and other.id == free
        second.rollback()
        # Across several queues too (the best job of each, then claimed by id).
        other = store.job_claim_held(second, ["q", "elsewhere"], "w2", 30.0)
        assert other is not None and other.id == free
        second.rollback()
        first.commit()  # the job stays claimed (running, committed) until its lease ends
        other = store.job_claim_held(second, ["q"], "w2", 30.0)
        assert other is not None and other.id == free
        second.rollback()


def test_a_leased_claim_skips_a_key_whose_held_job_runs(app: App, store: SyncStore) -> None:
    """A leased worker's whole batch claim waited behind a held-lock job of the same key."""
    keyed = enqueue(app, "q", 2, entity_key="k")
    free = enqueue(app, "q", 3)
    with connect(app) as held, connect(app) as leased:
        job = store.job_claim_held(held, ["q"], "w1", 30.0)
        assert job is not None and job.id == keyed[0]
        jobs = store.job_claim(leased, ["q"], 10, "w2", 30.0)
        assert sorted(j.id for j in jobs) == free
        jobs = store.job_claim(leased, ["q", "elsewhere"], 10, "w2", 30.0)
        assert jobs == []
        held.rollback()
        # The key is free again: its next job is claimable at once.
        jobs = store.job_claim(leased, ["q"], 10, "w2", 30.0)
        assert [j.id for j in jobs] == [keyed[0]]


def test_a_held_claim_skips_a_key_a_leased_job_runs(app: App, store: SyncStore) -> None:
    keyed = enqueue(app, "q", 2, entity_key="k")
    (free,) = enqueue(app, "q", 1)
    with connect(app) as held, connect(app) as leased:
        jobs = store.job_claim(leased, ["q"], 1, "w2", 30.0)
        assert [j.id for j in jobs] == [keyed[0]]
        job = store.job_claim_held(held, ["q"], "w1", 30.0)
        assert job is not None and job.id == free
        held.rollback()


# -- a worker, and doctor ----------------------------------------------------------------


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_worker_claims_its_other_queues_while_a_limited_queues_lock_is_held(
    app: App, stranger: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture, model: str
) -> None:
    """While a stranger holds the old advisory key of a limited queue and an admin session its
    row, the worker keeps running the jobs of its other queue, logs the episode once, and
    claims the limited queue's jobs once the row is let go."""
    ran: list[str] = []

    @app.task(name="lim_task", queue="lim")
    async def lim_task(n: int) -> None:
        ran.append("lim")

    @app.task(name="free_task", queue="free")
    async def free_task(n: int) -> None:
        ran.append("free")

    app.sync_client.set_concurrency_limit("lim", 2)
    lim_task.enqueue_many([{"n": i} for i in range(2)])
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock.queue'), hashtext(%s))", [f"{app.schema}/lim"]
    )
    worker = Worker(app, concurrency=2, model=model, queues=["lim", "free"], poll_interval=0.05)

    def busy() -> list[str]:
        return [r.getMessage() for r in caplog.records if "queue 'lim'" in r.getMessage()]

    with psycopg.connect(app.dsn) as admin:
        admin.execute(
            sql.SQL("SELECT * FROM {} WHERE name = 'lim' FOR UPDATE").format(
                sql.Identifier(app.schema, "queues")
            )
        )

        async def main() -> None:
            runs = asyncio.ensure_future(worker.run())
            try:
                for i in range(3):
                    await free_task.enqueue_async(n=i)
                await comes_true_async(lambda: ran.count("free") == 3 and busy(), 20)
                assert ran == ["free"] * 3, ran
                assert len(busy()) == 1
                admin.rollback()
                await comes_true_async(lambda: ran.count("lim") >= 2, 20)
            finally:
                worker.stop()
                await asyncio.wait_for(runs, 30)

        with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
            asyncio.run(main())
    assert sorted(ran) == ["free"] * 3 + ["lim"] * 2
    assert len(busy()) == 2, busy()  # the episode's start and end, once each
    assert "claims skipped" in busy()[0] and "free again" in busy()[1]


def test_doctor_names_the_sessions_that_hold_such_locks(
    app: App, store: SyncStore, stranger: psycopg.Connection[Any]
) -> None:
    def locks() -> Any:
        found = Doctor(app.dsn, app.schema, Thresholds(lock_seconds=0)).run()
        return {f.check: f for f in found}["locks"]

    app.sync_client.set_concurrency_limit("lim", 1)
    (job,) = enqueue(app, "q", 1, entity_key="k")
    with connect(app) as held:  # a worker's own markers and key lock are not reported
        assert store.job_claim_held(held, ["q"], "w", 30.0) is not None
        assert locks().status == "ok"
        held.rollback()
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_job'), hashtext(%s))",
        [f"{app.schema}/lim"],
    )
    with psycopg.connect(app.dsn) as admin:
        admin.execute(
            sql.SQL("SELECT * FROM {} WHERE name = 'lim' FOR UPDATE").format(
                sql.Identifier(app.schema, "queues")
            )
        )
        finding = locks()
        assert finding.status == "warn"
        pids = {h["pid"] for h in finding.details["holders"]}
        assert pids == {stranger.info.backend_pid, admin.info.backend_pid}
        assert "queue marker" in finding.message and "queues table" in finding.message
    stranger.execute("SELECT pg_advisory_unlock_all()")
    assert locks().status == "ok"
    # The advisory lock held-lock claims took on an entity key (migration 0016) delays nothing
    # now (the key's mark is a row lock only workers may take), so it is not reported.
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext(%s), hashtext('k'))", [f"skiplock_held_key/{app.schema}"]
    )
    assert locks().status == "ok"
    with connect(app) as conn:
        claimed = store.job_claim_held(conn, ["q"], "w", 30.0)
        assert claimed is not None and claimed.id == job
        conn.rollback()


# -- maintenance -------------------------------------------------------------------------


def test_maintenance_statements_wait_a_bounded_time_on_rows_another_session_locked(
    app: App, store: SyncStore, db: Any
) -> None:
    """Maintenance waited without a bound on rows an open transaction of another session (an
    admin's, a worker-role login's) had locked: now each such statement gives up after its
    lock timeout, and the step runs again next round."""
    (waiting,) = enqueue(app, "q", 1)
    jobs, leaders = sql.Identifier(app.schema, "jobs"), sql.Identifier(app.schema, "leaders")
    db.execute(sql.SQL("UPDATE {} SET status = 'waiting' WHERE id = %s").format(jobs), [waiting])
    with connect(app) as conn:
        assert store.leader_acquire(conn, "maintenance", "w1", 30.0)
    with psycopg.connect(app.dsn) as admin, connect(app) as conn:
        admin.execute(sql.SQL("SELECT * FROM {} FOR UPDATE").format(leaders))
        admin.execute(sql.SQL("SELECT * FROM {} FOR UPDATE").format(jobs))
        with pytest.raises(psycopg.errors.LockNotAvailable):
            store.leader_acquire(conn, "maintenance", "w1", 30.0)
        with pytest.raises(psycopg.errors.LockNotAvailable):
            store.job_release_waiting(conn)
        admin.rollback()
        assert store.leader_acquire(conn, "maintenance", "w1", 30.0)
        assert store.job_release_waiting(conn).released == {"q": 1}
        # The lock timeout was the statement's own: the session's is unchanged.
        assert conn.execute("SHOW lock_timeout").fetchone() == ("0",)


def test_concurrent_held_claims_take_one_job_of_a_key_and_wait_for_none(
    app: App, async_store: AsyncStore
) -> None:
    """Ten held-lock slots claim at once from a queue whose first jobs share a key: exactly one
    runs a job of the key, the others take the jobs without a key (a slot that lost the race
    for the key claims again), and none waits on another's transaction (each claim connection
    gives up after WAIT_GUARD_MS)."""
    keyed = set(enqueue(app, "q", 10, entity_key="k"))
    free = set(enqueue(app, "q", 20))

    async def scenario() -> list[Any]:
        store = async_store
        conns = [
            await psycopg.AsyncConnection.connect(
                app.dsn, autocommit=True, options=f"-c statement_timeout={WAIT_GUARD_MS}"
            )
            for _ in range(10)
        ]
        try:
            claims = [store.job_claim_held(c, ["q"], f"w{i}", 30.0) for i, c in enumerate(conns)]
            jobs = await asyncio.gather(*claims)
            for conn in conns:
                await conn.rollback()
            return jobs
        finally:
            for conn in conns:
                await conn.close()

    for _ in range(3):
        ids = [job.id for job in asyncio.run(scenario()) if job is not None]
        assert len(ids) == len(set(ids))
        assert len(keyed.intersection(ids)) == 1, ids
        assert len(free.intersection(ids)) >= 8, ids  # a slot may lose the race five times


def test_the_maintenance_leader_logs_a_stranger_holding_a_marker_once(
    app: App, stranger: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A stranger holding a held-lock marker is logged once per session and key, as doctor
    shows it; a worker runs the queue's jobs all the same."""

    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_job'), hashtext(%s))", [f"{app.schema}/q"]
    )
    job = t.with_options(entity_key="k").enqueue(n=1)
    other = t.enqueue(n=2)
    worker = Worker(app, burst=True, poll_interval=0.05)
    with caplog.at_level(logging.WARNING, logger="skiplock._runtime.maintenance"):
        asyncio.run(asyncio.wait_for(worker.run(), 30))
    said = [
        r.getMessage() for r in caplog.records if "may not write the jobs table" in r.getMessage()
    ]
    assert len(said) == 1, said
    assert str(stranger.info.backend_pid) in said[0] and "queue marker" in said[0]
    statuses = {j: app.sync_client.get_job(j) for j in (job.id, other.id)}
    assert {j: s.status for j, s in statuses.items() if s} == {job.id: "done", other.id: "done"}


def test_a_strangers_lock_on_an_entity_key_does_not_stop_claims_of_it(
    app: App, store: SyncStore, stranger: psycopg.Connection[Any]
) -> None:
    """Any login can take the advisory lock a held-lock claim took on its job's entity key
    (migration 0016): leased claims passed over such a key for as long as the stranger kept the
    lock, and then held-lock claims.  Both models take the key now."""
    keyed = enqueue(app, "q", 1, entity_key="k")
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_key/' || %s), hashtext('k'))",
        [app.schema],
    )
    with connect(app) as held, connect(app) as leased:
        (free,) = enqueue(app, "q", 1)
        job = store.job_claim_held(held, ["q"], "w1", 30.0)
        assert job is not None and job.id == keyed[0]
        held.rollback()
        jobs = store.job_claim(leased, ["q"], 10, "w2", 30.0)  # commits: they run now
        assert sorted(j.id for j in jobs) == sorted([*keyed, free])
        # Across several queues too, for a key of its own.
        stranger.execute(
            "SELECT pg_advisory_lock(hashtext('skiplock_held_key/' || %s), hashtext('k2'))",
            [app.schema],
        )
        other = enqueue(app, "q", 1, entity_key="k2")
        jobs = store.job_claim(leased, ["q", "elsewhere"], 10, "w2", 30.0)
        assert [j.id for j in jobs] == other


def test_a_noinherit_worker_login_counts_as_a_worker(app: App, store: SyncStore, db: Any) -> None:
    """A worker login made NOINHERIT, that sets the worker role after connecting, has no
    privilege of its own: its held-lock job's key lock and marker must still count as a
    worker's, or leased claims took the key's other job and waited on the unique index (5 s,
    then nothing claimed), and the queue's running count missed the job."""
    role, login = f"w_{secrets.token_hex(4)}", f"wl_{secrets.token_hex(4)}"
    schema, jobs = sql.Identifier(app.schema), sql.Identifier(app.schema, "jobs")
    db.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
    db.execute(
        sql.SQL("CREATE ROLE {} LOGIN NOINHERIT IN ROLE {}").format(
            sql.Identifier(login), sql.Identifier(role)
        )
    )
    try:
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, sql.Identifier(role)))
        db.execute(
            sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA {} TO {}").format(
                schema, sql.Identifier(role)
            )
        )
        db.execute(sql.SQL("GRANT ALL ON ALL SEQUENCES IN SCHEMA {} TO {}").format(
            schema, sql.Identifier(role)))  # fmt: skip
        keyed = enqueue(app, "q", 2, entity_key="k")
        (free,) = enqueue(app, "q", 1)
        worker_dsn = conninfo.make_conninfo(app.dsn, user=login, options=f"-c role={role}")
        with psycopg.connect(worker_dsn, autocommit=True) as held, connect(app) as leased:
            job = store.job_claim_held(held, ["q"], "w1", 30.0)
            assert job is not None and job.id == keyed[0]
            running = store._rows(
                leased, "queue_running_count", {"schema": app.schema, "queue": "q"}
            )
            assert running == [(1,)]  # its held-lock job counts
            started = time.monotonic()
            jobs = store.job_claim(leased, ["q"], 10, "w2", 30.0)
            assert [j.id for j in jobs] == [free]
            assert time.monotonic() - started < 1.0  # never waited on the key's running job
            held.rollback()
    finally:
        for name in (login, role):
            db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


# -- held-lock entity keys: a mark only a worker can set ---------------------------------


@pytest.fixture(params=["stranger", "enqueuer"])
def outsider(
    request: pytest.FixtureRequest, pg_dsn: str, schema: str, db: Any
) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit session of a login that is not a worker: one with nothing but CONNECT, or
    a member of the enqueuer role of `skiplock roles` (a producer's login)."""
    if request.param == "stranger":
        yield request.getfixturevalue("stranger")
        return
    with (
        role_logins(db, pg_dsn, schema) as roles,
        psycopg.connect(roles.dsn["enqueuer"], autocommit=True) as conn,
    ):
        yield conn


def take_every_key_lock(outsider: psycopg.Connection[Any], schema: str, key: str) -> None:
    """Every lock an outsider could take to mark ``key`` held: the advisory lock held-lock
    claims took on it (migration 0016), and the row lock of its slot, which it may not take."""
    outsider.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_key/' || %s), hashtext(%s))",
        [schema, key],
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        outsider.execute(
            sql.SQL("SELECT FROM {} WHERE slot = hashtext(%s) & 65535 FOR UPDATE").format(
                sql.Identifier(schema, "held_key_slots")
            ),
            [key],
        )


def test_an_outsiders_lock_on_an_entity_key_does_not_hold_up_its_held_lock_jobs(
    app: App, store: SyncStore, outsider: psycopg.Connection[Any]
) -> None:
    """A login that is not a worker held the advisory lock a held-lock claim took on its job's
    entity key: held-lock workers passed the key's jobs over for as long as it kept it.  Now
    the key's mark is a row lock only the worker role may take: held-lock claims take the key
    at once, and a second claim still passes it over while its job runs."""
    keyed = enqueue(app, "q", 2, entity_key="k")
    take_every_key_lock(outsider, app.schema, "k")
    (free,) = enqueue(app, "q", 1)
    with connect(app) as first, connect(app) as second, connect(app) as leased:
        started = time.monotonic()
        job = store.job_claim_held(first, ["q"], "w1", 30.0)
        assert job is not None and job.id == keyed[0]
        assert time.monotonic() - started < 1.0
        # While it runs, the key is passed over by the other claims, which nobody can fake.
        other = store.job_claim_held(second, ["q"], "w2", 30.0)
        assert other is not None and other.id == free
        second.rollback()
        other = store.job_claim_held(second, ["q", "elsewhere"], "w2", 30.0)
        assert other is not None and other.id == free
        second.rollback()
        assert [j.id for j in store.job_claim(leased, ["q", "elsewhere"], 10, "w3", 30.0)] == [free]
        first.rollback()
    # Across several queues (the candidates first, then the claim by id), with the key free.
    with connect(app) as conn:
        job = store.job_claim_held(conn, ["q", "elsewhere"], "w1", 30.0)
        assert job is not None and job.id == keyed[0]
        conn.rollback()


def test_held_lock_workers_run_a_keys_jobs_while_an_outsider_holds_its_lock(
    app: App, outsider: psycopg.Connection[Any]
) -> None:
    """End to end: a held-lock worker runs every job of the key, one at a time, while the
    outsider keeps its locks."""
    ran: list[int] = []

    @app.task(name="t", queue="q")
    def t(n: int) -> None:
        ran.append(n)

    take_every_key_lock(outsider, app.schema, "k")
    t.with_options(entity_key="k").enqueue_many([{"n": i} for i in range(3)])
    worker = Worker(app, model="held", concurrency=2, burst=True, poll_interval=0.05)
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert sorted(ran) == [0, 1, 2]
    assert time.monotonic() - started < 10


def test_a_schema_migrated_after_its_roles_were_made_gives_the_worker_role_the_slots(
    pg_dsn: str, db: Any
) -> None:
    """Upgrading: the roles were made (as `skiplock roles` of the last version made the worker
    role: it may update jobs) before the migration that added the slots.  Every role that may
    update jobs gets the slots with the migration, so held-lock claims of keyed jobs keep
    working before `skiplock roles` is run again; a role that may not gets nothing."""
    schema = f"t_{secrets.token_hex(5)}"
    role, login = f"w_{secrets.token_hex(4)}", f"wl_{secrets.token_hex(4)}"
    app = App(pg_dsn, schema)
    ident = sql.Identifier
    try:
        slots = next(m.version for m in all_migrations() if m.name == "held_key_slots")
        app.sync_client.migrate(up_to=slots - 1)  # the schema as it was before the slots
        db.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(ident(role)))
        db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(ident(login), ident(role)))
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident(schema), ident(role)))
        db.execute(
            sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA {} TO {}").format(ident(schema), ident(role))
        )
        app.sync_client.migrate()
        (keyed,) = enqueue(app, "q", 1, entity_key="k")
        with psycopg.connect(conninfo.make_conninfo(pg_dsn, user=login), autocommit=True) as w:
            job = sync_store(app).job_claim_held(w, ["q"], "w", 30.0)
            assert job is not None and job.id == keyed
            w.rollback()
        granted = db.execute(
            "SELECT grantee, privilege_type FROM information_schema.role_table_grants"
            " WHERE table_schema = %s AND table_name = 'held_key_slots' ORDER BY 1, 2",
            [schema],
        ).fetchall()
        assert [g for g in granted if g[0] != "postgres"] == [(role, "SELECT"), (role, "UPDATE")]
        granted = db.execute(
            "SELECT grantee, privilege_type FROM information_schema.role_table_grants"
            " WHERE table_schema = %s AND table_name = 'held_runs' ORDER BY 1, 2",
            [schema],
        ).fetchall()
        assert [g for g in granted if g[0] != "postgres"] == [
            (role, "DELETE"), (role, "INSERT"), (role, "SELECT"), (role, "UPDATE")
        ]  # fmt: skip
    finally:
        app.sync_client.drop_schema()
        app.close()
        for name in (login, role):
            db.execute(sql.SQL("DROP OWNED BY {}").format(ident(name)))
            db.execute(sql.SQL("DROP ROLE {}").format(ident(name)))


def test_a_held_claim_of_a_keyed_job_waits_only_for_a_leased_claim_in_flight(
    app: App, store: SyncStore
) -> None:
    """A leased claim that meets a keyed job while no held-lock job with a key runs keeps row
    -1 of the slots until it commits, and reads no slot: a held-lock claim of a keyed job waits
    for that, a few milliseconds in a worker; the row is the workers' alone (see
    take_every_key_lock), so no one else can make it wait."""
    (keyed,) = enqueue(app, "q", 1, entity_key="k")
    slots = sql.Identifier(app.schema, "held_key_slots")
    with psycopg.connect(app.dsn) as leased, connect(app) as held:
        leased.execute(sql.SQL("SELECT FROM {} WHERE slot = -1 FOR UPDATE").format(slots))
        claimed: list[Any] = []
        started = time.monotonic()
        claim = threading.Thread(
            target=lambda: claimed.append(store.job_claim_held(held, ["q"], "w", 30.0))
        )
        claim.start()
        time.sleep(0.5)
        assert claimed == []  # waiting for the leased claim's transaction
        leased.commit()
        claim.join(5)
        assert len(claimed) == 1 and claimed[0] is not None and claimed[0].id == keyed
        assert 0.5 <= time.monotonic() - started < 5
        held.rollback()


def test_a_strangers_lock_on_a_jobs_held_marker_does_not_keep_its_progress(
    app: App, store: SyncStore, stranger: psycopg.Connection[Any]
) -> None:
    """The leader kept the progress row of a job while any session held the job's held-lock
    marker key: a stranger's lock on it kept a finished job's progress for as long."""
    (job_id,) = enqueue(app, "q", 1)
    with connect(app) as conn:
        [leased] = store.job_claim(conn, ["q"], 1, "w", 30.0)
        assert store.job_progress_write(conn, [ProgressReport(leased.claim, 0.5, None)])
        assert store.job_complete_many(conn, [leased.claim]) == {job_id}
        stranger.execute(
            "SELECT pg_advisory_lock_shared(hashtext(%s), %s::bigint::bit(32)::int)",
            [f"skiplock_held_job_id/{app.schema}", job_id],
        )
        assert store.job_progress_prune(conn, keep_seconds=0) == 1


# -- held-lock jobs counted by row locks only a worker can take (issue 41) ----------------


def take_marker_keys(stranger: psycopg.Connection[Any], schema: str, queue: str, job: int) -> None:
    """A stranger's exclusive locks on both advisory keys a held-lock claim marks its job with:
    its queue's and its id's (the low 32 bits)."""
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_job'), hashtext(%s)),"
        " pg_advisory_lock(hashtext(%s), %s::bigint::bit(32)::int)",
        [f"{schema}/{queue}", f"skiplock_held_job_id/{schema}", job],
    )


def test_a_strangers_exclusive_lock_on_a_queues_held_marker_does_not_stop_the_queue(
    app: App, store: SyncStore, stranger: psycopg.Connection[Any]
) -> None:
    """A stranger holding the queue's held-lock marker key exclusively stopped every claim of a
    limited queue (QueueLockBusy, for as long as it held the key): held-lock claims could not
    mark their jobs, so the count would have missed them.  Now the count reads row locks only
    workers can take: the queue is claimed at once and its limit still holds."""
    ids = enqueue(app, "lim", 4)
    app.sync_client.set_concurrency_limit("lim", 2)
    take_marker_keys(stranger, app.schema, "lim", ids[0])
    with connect(app) as held, connect(app) as guard, connect(app) as leased:
        job = store.job_claim_held_limited(
            held, guard, LimitedClaim("lim", QueueLimits(2, False), "w1", 30.0)
        )
        assert job is not None and job.id == ids[0]
        status = {row["queue"]: row for row in app.sync_client.queue_status()}
        assert status["lim"]["running"] == 1 and status["lim"]["pending"] == 3
        jobs = store.job_claim_limited(
            leased, LimitedClaim("lim", QueueLimits(2, False), "w2", 30.0, want=10)
        )
        assert [j.id for j in jobs] == [ids[1]]  # the held-lock job counts: room for one
        assert (
            store.job_claim_held_limited(
                leased, guard, LimitedClaim("lim", QueueLimits(2, False), "w3", 30.0)
            )
            is None
        )
        held.rollback()
        jobs = store.job_claim_limited(
            leased, LimitedClaim("lim", QueueLimits(2, False), "w2", 30.0, want=10)
        )
        assert [j.id for j in jobs] == [ids[0]]


def test_a_strangers_exclusive_lock_on_a_jobs_held_marker_does_not_show_it_pending(
    app: App, store: SyncStore, stranger: psycopg.Connection[Any]
) -> None:
    """A stranger's exclusive lock on a job's held-lock marker key kept the held-lock claim from
    marking the job: it ran shown pending (job, list, status) and its progress was refused and
    pruned.  Now its run is read from row locks a stranger cannot take."""
    (job_id, other) = enqueue(app, "q", 2)
    take_marker_keys(stranger, app.schema, "q", job_id)
    with connect(app) as held, connect(app) as side:
        job = store.job_claim_held(held, ["q"], "w", 30.0)
        assert job is not None and job.id == job_id
        shown = app.sync_client.get_job(job_id)
        assert shown is not None and shown.status == "running"
        listed = {j.id: j.status for j in app.sync_client.list_jobs(queue="q")}
        assert listed == {job_id: "running", other: "pending"}
        status = {row["queue"]: row for row in app.sync_client.queue_status()}
        assert status["q"]["running"] == 1 and status["q"]["pending"] == 1
        report = ProgressReport(job.claim, 0.5, "half", held_pid=held.info.backend_pid)
        assert store.job_progress_write(side, [report]) == {job_id}
        assert store.job_progress_prune(side, keep_seconds=0) == 0
        # Another session's pid does not own the job's run.
        wrong = ProgressReport(job.claim, 0.6, None, held_pid=side.info.backend_pid)
        assert store.job_progress_write(side, [wrong]) == set()
        held.rollback()
    shown = app.sync_client.get_job(job_id)
    assert shown is not None and shown.status == "pending"
    with connect(app) as side:
        assert store.job_progress_prune(side, keep_seconds=0) == 1


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_worker_drains_a_limited_queue_whose_held_marker_a_stranger_holds(
    app: App, stranger: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture, model: str
) -> None:
    """End to end: a worker runs every job of a limited queue while a stranger holds its
    held-lock marker key, and the maintenance leader logs the stranger."""
    ran: list[int] = []

    @app.task(name="t", queue="lim")
    def t(n: int) -> None:
        ran.append(n)

    app.sync_client.set_concurrency_limit("lim", 2)
    t.enqueue_many([{"n": i} for i in range(6)])
    stranger.execute(
        "SELECT pg_advisory_lock(hashtext('skiplock_held_job'), hashtext(%s))",
        [f"{app.schema}/lim"],
    )
    worker = Worker(app, model=model, concurrency=2, burst=True, poll_interval=0.05)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert sorted(ran) == list(range(6))
    assert time.monotonic() - started < 10
    said = [
        r.getMessage() for r in caplog.records if "may not write the jobs table" in r.getMessage()
    ]
    assert len(said) == 1 and str(stranger.info.backend_pid) in said[0], said


def test_an_outsider_cannot_mark_a_held_run(
    app: App, store: SyncStore, outsider: psycopg.Connection[Any]
) -> None:
    """The rows that count and show running held-lock jobs (migration 0024) are locked by a
    worker's claim; a login that is not a worker can neither lock nor write them, so it can
    neither fake a running job nor keep one from being counted."""
    (job_id,) = enqueue(app, "q", 1)
    with connect(app) as held:
        assert store.job_claim_held(held, ["q"], "w", 30.0) is not None
        runs = sql.Identifier(app.schema, "held_runs")
        for statement in (
            sql.SQL("SELECT FROM {} FOR KEY SHARE").format(runs),
            sql.SQL("INSERT INTO {} (queue, pid) VALUES ('q', pg_backend_pid())").format(runs),
            sql.SQL("DELETE FROM {}").format(runs),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                outsider.execute(statement)
        shown = app.sync_client.get_job(job_id)
        assert shown is not None and shown.status == "running"
        held.rollback()
