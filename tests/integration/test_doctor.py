"""`skiplock doctor` against a real server: each condition is created for real in the test's
schema (or session), and doctor must report it, with its numbers and a fix; a fresh schema is
healthy.  Where a fix is a statement, the test runs it and doctor must then be satisfied."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from helpers.polling import comes_true
from helpers.stores import SyncStore
from skiplock import App, JobStatus, Worker
from skiplock._doctor.command import Doctor, Finding, Thresholds
from skiplock._doctor.findings import byte_size
from skiplock.app import DEFAULT_RETENTION


def findings(dsn: str, schema: str, **thresholds: Any) -> dict[str, Finding]:
    """Doctor's findings by check name (each check reports once)."""
    found = Doctor(dsn, schema, Thresholds(**thresholds)).run()
    by_check = {f.check: f for f in found}
    assert len(by_check) == len(found), [f.check for f in found]
    return by_check


def wait_for_finding(
    dsn: str,
    schema: str,
    check: str,
    until: Callable[[Finding], bool],
    timeout: float = 10.0,
    **thresholds: Any,
) -> Finding:
    """Run doctor until ``check``'s finding satisfies ``until`` (statistics arrive late); the
    last finding either way, for the test to assert on."""
    last: list[Finding] = []

    def satisfied() -> bool:
        last[:] = [findings(dsn, schema, **thresholds)[check]]
        return until(last[0])

    comes_true(satisfied, timeout, step=0.3)
    return last[0]


def table(schema: str, name: str = "jobs") -> sql.Identifier:
    return sql.Identifier(schema, name)


def flush_statistics(db: psycopg.Connection[Any]) -> None:
    """Publish this session's table statistics now, not after up to 10 s idle (PG 15+)."""
    db.execute("SELECT pg_stat_force_next_flush()")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiplock", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def autovacuum_on(db: psycopg.Connection[Any]) -> bool:
    return db.execute("SELECT current_setting('autovacuum') = 'on'").fetchone()[0]  # type: ignore[index,no-any-return]


# -- a healthy schema ----------------------------------------------------------------------


def test_fresh_schema_is_healthy_and_exits_0(pg_dsn: str, schema: str, db: Any) -> None:
    result = run_cli("doctor", "--dsn", pg_dsn, "--schema", schema, "--json")
    report = json.loads(result.stdout)
    by_check = {f["check"]: f for f in report["findings"]}
    expected = {
        "schema", "xmin_horizon", "autovacuum", "dead_tuples", "workers", "expired_leases",
        "impossible_states", "claim_index", "retention", "archive", "locks", "listen",
        "connections",
    }  # fmt: skip
    assert set(by_check) == expected, result.stdout
    # This CI server runs with autovacuum off (conf.d/90-ci.conf): doctor must say so, and
    # that is the only thing it may find on a fresh schema.
    av_expected = "ok" if autovacuum_on(db) else "warn"
    assert by_check["autovacuum"]["status"] == av_expected
    for check, f in by_check.items():
        if check != "autovacuum":
            assert f["status"] == "ok", (check, f)
    assert report["status"] == av_expected
    assert result.returncode == (0 if av_expected == "ok" else 1), result.stderr
    assert result.stderr == ""
    # Only failures count with --fail-on fail: exit 0 on a healthy schema whatever the server.
    relaxed = run_cli("doctor", "--dsn", pg_dsn, "--schema", schema, "--fail-on", "fail")
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    assert "schema" in relaxed.stdout and "claim_index" in relaxed.stdout


def test_unmigrated_schema_and_missing_migration_fail(pg_dsn: str, schema: str, db: Any) -> None:
    missing = findings(pg_dsn, f"nothing_{secrets.token_hex(4)}")
    assert missing["schema"].status == "fail"
    assert "missing" in missing["schema"].message and "skiplock migrate" in missing["schema"].fix
    assert "claim_index" not in missing and "dead_tuples" not in missing  # no tables to check
    assert {"xmin_horizon", "listen", "connections"} <= set(missing)

    db.execute(sql.SQL("DELETE FROM {} WHERE version = 2").format(table(schema, "migrations")))
    behind = findings(pg_dsn, schema)["schema"]
    assert behind.status == "fail" and "0002" in behind.message, behind


# -- sessions holding back the xmin horizon ------------------------------------------------


def test_idle_in_transaction_session_is_reported_with_its_age(
    pg_dsn: str, schema: str, db: Any
) -> None:
    db.execute(sql.SQL("CREATE TABLE {} (n int)").format(table(schema, "scratch")))
    with psycopg.connect(pg_dsn, application_name="analytics-notebook") as idle:
        idle.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(table(schema, "scratch")))
        pid = idle.info.backend_pid
        time.sleep(1.5)  # idle in transaction, holding a transaction id

        found = findings(pg_dsn, schema, transaction_seconds=1.0)["xmin_horizon"]
        assert found.status == "warn", found
        [session] = [s for s in found.details["sessions"] if s["pid"] == pid]
        assert session["state"] == "idle in transaction"
        assert session["xact_seconds"] >= 1.5
        assert session["application_name"] == "analytics-notebook"
        assert session["skiplock"] is False
        assert f"pid {pid}" in found.message and "idle in transaction" in found.message
        assert "pg_terminate_backend" in found.fix
        assert "idle_in_transaction_session_timeout" in found.fix

        # Over ten times the limit: a failure; under the limit: not reported.
        assert findings(pg_dsn, schema, transaction_seconds=0.1)["xmin_horizon"].status == "fail"
        quiet = findings(pg_dsn, schema, transaction_seconds=3600)["xmin_horizon"]
        assert quiet.status == "ok" and f"pid {pid}" not in quiet.message

        # The command line: the age option, the JSON and the exit status.
        result = run_cli(
            "doctor", "--dsn", pg_dsn, "--schema", schema, "--json", "--transaction-age", "1"
        )
        assert result.returncode == 1, result.stderr
        report = json.loads(result.stdout)
        [xmin] = [f for f in report["findings"] if f["check"] == "xmin_horizon"]
        assert pid in [s["pid"] for s in xmin["details"]["sessions"]]
        idle.rollback()
    after = findings(pg_dsn, schema, transaction_seconds=1.0)["xmin_horizon"]
    assert pid not in [s["pid"] for s in after.details.get("sessions", [])]


def test_a_long_held_lock_job_is_reported_as_skiplocks_own(app: App, db: Any) -> None:
    started = threading.Event()

    @app.task(name="slow_held", model="held")
    async def slow_held() -> None:
        started.set()
        await asyncio.sleep(2.0)

    job_id = slow_held.enqueue().id
    worker = Worker(app, burst=True, concurrency=1)
    thread = threading.Thread(target=lambda: asyncio.run(worker.run()))
    thread.start()
    try:
        assert started.wait(10)
        time.sleep(0.8)
        found = findings(app.dsn, app.schema, transaction_seconds=0.5)["xmin_horizon"]
    finally:
        thread.join(30)
    assert found.status in ("warn", "fail"), found
    own = [s for s in found.details["sessions"] if s["skiplock"]]
    assert own, found.message
    assert own[0]["state"] == "idle in transaction"
    assert "held-lock job" in found.message
    job = app.get_job(job_id)
    assert job is not None and job.status == JobStatus.DONE


def test_only_own_sessions_visible_without_pg_monitor(pg_dsn: str, schema: str, db: Any) -> None:
    user = f"doctor_nobody_{secrets.token_hex(4)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(user)))
    try:
        with psycopg.connect(pg_dsn) as idle:  # another user's write transaction, left open
            idle.execute("SELECT txid_current()")
            time.sleep(0.6)
            as_user = conninfo.make_conninfo(pg_dsn, user=user)
            found = findings(as_user, schema, transaction_seconds=0.3)
            # No grant on the schema: the table checks are skipped, saying why.
            assert found["schema"].status == "warn", found["schema"]
            assert "permission denied for schema" in found["schema"].message
            assert "admin role" in found["schema"].fix
            assert "claim_index" not in found
            assert found["listen"].status == "ok" and found["connections"].status == "ok"
            assert found["visibility"].status == "warn"
            assert "pg_monitor" in found["visibility"].fix
            assert idle.info.backend_pid not in [
                s["pid"] for s in found["xmin_horizon"].details.get("sessions", [])
            ]
            # The superuser sees it.
            sees = findings(pg_dsn, schema, transaction_seconds=0.3)
            assert "visibility" not in sees
            sessions = sees["xmin_horizon"].details["sessions"]
            assert idle.info.backend_pid in [s["pid"] for s in sessions]
            idle.rollback()
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(user)))


# -- table health --------------------------------------------------------------------------


def test_dead_tuples_with_autovacuum_disabled_are_reported(
    pg_dsn: str, schema: str, db: Any
) -> None:
    jobs = table(schema)
    db.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(jobs))
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, status, finished_at) "
            "SELECT 'q', 't', '{{}}', 'done', now() FROM generate_series(1, 20000)"
        ).format(jobs)
    )
    for i in range(2):
        db.execute(sql.SQL("UPDATE {} SET last_error = %s").format(jobs), [f"pass {i}"])
    flush_statistics(db)

    found = wait_for_finding(
        pg_dsn,
        schema,
        "dead_tuples",
        lambda f: any(t["n_dead_tup"] >= 20000 for t in f.details["tables"]),
    )
    assert found.status == "fail", found  # more dead rows than live ones
    [stats] = [t for t in found.details["tables"] if t["relname"] == "jobs"]
    assert stats["n_dead_tup"] >= 20000 and stats["n_dead_tup"] > stats["n_live_tup"]
    assert f"{schema}.jobs has {stats['n_dead_tup']} dead rows" in found.message
    assert f"autovacuum is disabled on {schema}.jobs" in found.message
    assert "never" in found.message  # never vacuumed
    assert "VACUUM" in found.fix and "RESET (autovacuum_enabled)" in found.fix

    # The fix: vacuum and re-enable autovacuum; then nothing to report.
    db.execute(sql.SQL("ALTER TABLE {} RESET (autovacuum_enabled)").format(jobs))

    def vacuumed(finding: Finding) -> bool:
        # Again until it took: another session's snapshot on a shared server (a test running
        # beside this one) keeps VACUUM from removing the rows until it ends.
        if finding.status != "ok":
            db.execute(sql.SQL("VACUUM (ANALYZE) {}").format(jobs))
            flush_statistics(db)
        return finding.status == "ok"

    db.execute(sql.SQL("VACUUM (ANALYZE) {}").format(jobs))
    healed = wait_for_finding(pg_dsn, schema, "dead_tuples", vacuumed, timeout=60)
    assert healed.status == "ok", healed
    assert "jobs: 20000 live, 0 dead, vacuumed" in healed.message


def test_a_few_dead_tuples_are_not_reported(pg_dsn: str, schema: str, db: Any) -> None:
    jobs = table(schema)
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload) SELECT 'q', 't', '{{}}' "
            "FROM generate_series(1, 300)"
        ).format(jobs)
    )
    db.execute(sql.SQL("UPDATE {} SET priority = 1").format(jobs))
    flush_statistics(db)
    found = wait_for_finding(
        pg_dsn,
        schema,
        "dead_tuples",
        lambda f: any(t["n_dead_tup"] > 0 for t in f.details["tables"]),
    )
    assert found.status == "ok", found  # 300 dead rows: below the 10,000 floor
    stricter = findings(pg_dsn, schema, dead_tuples=100)["dead_tuples"]
    assert stricter.status == "warn", stricter  # ratio 1:1 -> warn, not more dead than live


def test_the_charts_counts_are_checked_as_the_other_tables_with_their_size(
    pg_dsn: str, schema: str, db: Any
) -> None:
    """finished_counts (migration 0025) takes a row per outcome statement of completion="delete"
    and "archive" and loses them to the maintenance leader's merges: its dead rows are checked
    as the jobs table's are, and every table's size is shown."""
    counts = table(schema, "finished_counts")
    db.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(counts))
    db.execute(
        sql.SQL(
            "INSERT INTO {} (minute, queue, done, failed, wait_sum, wait_max, buckets, counts) "
            "SELECT date_trunc('minute', now()), 'q', 1, 0, 0, 0, '{{0}}', '{{1}}' "
            "FROM generate_series(1, 300)"
        ).format(counts)
    )
    db.execute(sql.SQL("DELETE FROM {}").format(counts))
    flush_statistics(db)
    found = wait_for_finding(
        pg_dsn,
        schema,
        "dead_tuples",
        lambda f: any(t["relname"] == "finished_counts" and t["n_dead_tup"] >= 300
                      for t in f.details["tables"]),
        dead_tuples=100,
    )  # fmt: skip
    assert found.status == "fail", found  # 300 dead rows, none live
    assert f"{schema}.finished_counts has 300 dead rows for 0 live ones" in found.message
    assert f"autovacuum is disabled on {schema}.finished_counts" in found.message
    assert f'VACUUM (ANALYZE) "{schema}".finished_counts;' in found.fix
    [stats] = [t for t in found.details["tables"] if t["relname"] == "finished_counts"]
    assert stats["bytes"] > 0

    # Below the thresholds (not vacuumed: another session's transaction on a shared server
    # could keep VACUUM from removing the rows), each table is listed with its size.
    db.execute(sql.SQL("ALTER TABLE {} RESET (autovacuum_enabled)").format(counts))
    calm = findings(pg_dsn, schema, dead_tuples=10**9)["dead_tuples"]
    assert calm.status == "ok", calm
    sizes = {t["relname"]: t["bytes"] for t in calm.details["tables"]}
    for name in ("jobs", "finished_counts"):
        shown = re.search(rf"\b{name}: \d+ live, \d+ dead, [^,;]+, ([^;]+)", calm.message)
        assert shown is not None, calm.message
        assert shown.group(1) == byte_size(sizes[name]), calm.message


def test_every_table_of_the_schema_is_checked_for_dead_rows(
    pg_dsn: str, schema: str, db: Any
) -> None:
    """Rows come and go in the held-lock bookkeeping (held_runs, held_starts, held_key_runs),
    the key limits and the progress table as in the jobs table: each of the schema's tables is
    checked and shown, one added by a later migration included."""
    tables = {
        r[0]
        for r in db.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", [schema]
        ).fetchall()
    }
    assert {"jobs", "held_runs", "held_key_runs", "job_progress", "key_limits"} <= tables
    runs = table(schema, "held_runs")
    db.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(runs))
    found = findings(pg_dsn, schema, dead_tuples=10**9)["dead_tuples"]
    checked = {t["relname"] for t in found.details["tables"]}
    assert checked == tables, tables ^ checked
    assert f"autovacuum is disabled on {schema}.held_runs" in found.message


# -- leases --------------------------------------------------------------------------------


def test_queues_with_due_jobs_and_no_live_worker_are_reported(app: App, db: Any) -> None:
    @app.task(name="mail", queue="mail")
    def mail() -> None: ...

    @app.task(name="video", queue="video")
    def video() -> None: ...

    def add_worker(worker_id: str, queues: str, ago: float) -> None:
        db.execute(
            sql.SQL(
                "INSERT INTO {} (id, host, pid, queues, concurrency, model, version, seen_at) "
                "VALUES (%s, 'h', 1, %s, 1, 'lease', '0', now() - make_interval(secs => %s))"
            ).format(table(app.schema, "workers")),
            (worker_id, queues, ago),
        )

    assert findings(app.dsn, app.schema)["workers"].status == "ok"  # nothing due, no worker
    mail.enqueue()
    mail.enqueue()
    video.with_options(delay=3600).enqueue()  # scheduled, not due: needs no worker yet
    found = findings(app.dsn, app.schema)["workers"]
    assert found.status == "warn", found
    assert found.message.startswith("mail has 2 due job(s)") and "video" not in found.message
    assert "skiplock worker" in found.fix

    add_worker("silent-one", "{mail}", 120)  # a killed worker does not serve the queue
    assert "mail has 2 due" in findings(app.dsn, app.schema)["workers"].message
    add_worker("live-one", "{mail,video}", 1)
    served = findings(app.dsn, app.schema)["workers"]
    assert served.status == "ok", served
    assert "1 live worker(s)" in served.message and "1 silent worker row(s)" in served.message

    # A silent worker with jobs still running under its name: its jobs wait for their leases.
    job_id = mail.enqueue().id
    db.execute(
        sql.SQL(
            "UPDATE {} SET status = 'running', locked_by = 'silent-one', attempts = 1, "
            "locked_until = now() + interval '30 seconds' WHERE id = %s"
        ).format(table(app.schema, "jobs")),
        (job_id,),
    )
    stuck = findings(app.dsn, app.schema)["workers"]
    assert stuck.status == "warn"
    assert "worker silent-one stopped reporting" in stuck.message
    assert "1 job(s) still running under its name" in stuck.message
    assert [w["id"] for w in stuck.details["silent"]] == ["silent-one"]


def test_expired_leases_are_reported(app: App, store: SyncStore, db: Any) -> None:
    @app.task(name="leased")
    def leased() -> None: ...

    ids = [e.id for e in leased.enqueue_many([{}, {}, {}])]
    claimed = store.job_claim(db, ["default"], 3, "gone-worker", 0.1)
    assert sorted(j.id for j in claimed) == ids
    time.sleep(0.5)

    found = findings(app.dsn, app.schema, lease_grace=0.2)["expired_leases"]
    assert found.status == "warn", found
    assert found.details["count"] == 3
    assert found.details["oldest_seconds"] >= 0.4
    assert sorted(found.details["some_ids"]) == ids
    assert "3 running job(s)" in found.message
    assert "no worker has ever been the maintenance leader" in found.message
    assert "run at least one worker" in found.fix

    # Within the default grace the leader may simply not have come round yet: no finding.
    assert findings(app.dsn, app.schema)["expired_leases"].status == "ok"

    # A leader that stopped renewing is named.
    db.execute(
        sql.SQL(
            "INSERT INTO {} (role, holder, expires_at) "
            "VALUES ('maintenance', 'old-host:1:abc', now() - interval '5 minutes')"
        ).format(table(app.schema, "leaders"))
    )
    stale = findings(app.dsn, app.schema, lease_grace=0.2)["expired_leases"]
    assert "old-host:1:abc stopped renewing 5min ago" in stale.message, stale.message

    # Reclaimed (what the leader does): nothing left to report.
    assert set(store.job_reclaim_expired(db)) == set(ids)
    assert findings(app.dsn, app.schema, lease_grace=0.2)["expired_leases"].status == "ok"


# -- the claim index -----------------------------------------------------------------------


def test_missing_claim_index_fails_and_its_fix_restores_it(
    pg_dsn: str, schema: str, db: Any
) -> None:
    db.execute(sql.SQL("DROP INDEX {}").format(table(schema, "jobs_claim_idx")))
    found = findings(pg_dsn, schema)["claim_index"]
    assert found.status == "fail" and "missing" in found.message, found
    assert found.fix.startswith("CREATE INDEX CONCURRENTLY jobs_claim_idx")

    result = run_cli("doctor", "--dsn", pg_dsn, "--schema", schema, "--fail-on", "fail")
    assert result.returncode == 1
    assert "CREATE INDEX CONCURRENTLY" in result.stdout

    db.execute(found.fix)  # the printed fix, as is
    assert findings(pg_dsn, schema)["claim_index"].status == "ok"
    plan = db.execute(
        sql.SQL(
            "EXPLAIN SELECT id FROM {} WHERE status = 'pending' AND queue = 'q' "
            "ORDER BY priority, run_at, id LIMIT 1"
        ).format(table(schema))
    ).fetchall()
    assert "jobs_claim_idx" in " ".join(r[0] for r in plan)


def test_invalid_indexes_from_failed_concurrent_builds(pg_dsn: str, schema: str, db: Any) -> None:
    jobs = table(schema)
    db.execute(
        sql.SQL("INSERT INTO {} (queue, task, payload) VALUES ('q', 't', '{{}}'), "
                "('q', 't', '{{}}')").format(jobs)
    )  # fmt: skip
    # A unique index over duplicates fails half-way and stays behind, invalid.
    db.execute(sql.SQL("DROP INDEX {}").format(table(schema, "jobs_claim_idx")))
    for name in ("jobs_claim_idx", "jobs_queue_ccnew"):
        with pytest.raises(psycopg.errors.UniqueViolation):
            db.execute(
                sql.SQL("CREATE UNIQUE INDEX CONCURRENTLY {} ON {} (queue)").format(
                    sql.Identifier(name), jobs
                )
            )
    found = findings(pg_dsn, schema)
    assert found["claim_index"].status == "fail", found["claim_index"]
    assert "invalid" in found["claim_index"].message
    assert "REINDEX INDEX CONCURRENTLY" in found["claim_index"].fix
    leftovers = found["invalid_indexes"]
    assert leftovers.status == "warn" and leftovers.details["indexes"] == ["jobs_queue_ccnew"]
    assert "DROP INDEX CONCURRENTLY" in leftovers.fix

    db.execute(leftovers.fix)
    assert "invalid_indexes" not in findings(pg_dsn, schema)


def test_bloated_claim_index_is_reported_and_reindex_fixes_it(
    pg_dsn: str, schema: str, db: Any
) -> None:
    jobs = table(schema)
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload) SELECT 'q', 't', '{{}}' "
            "FROM generate_series(1, 20000)"
        ).format(jobs)
    )
    small = {"index_min_bytes": 256 * 1024}
    full = findings(pg_dsn, schema, **small)["claim_index"]
    assert full.status == "ok", full  # big, but every entry is a pending job
    assert full.details["pending"] == 20000 and full.details["bytes"] >= 256 * 1024

    # The backlog drains: the index keeps its size (nothing vacuums it) for no pending job.
    db.execute(sql.SQL("UPDATE {} SET status = 'done', finished_at = now()").format(jobs))
    bloated = findings(pg_dsn, schema, **small)["claim_index"]
    assert bloated.status == "warn", bloated
    assert "bloated" in bloated.message and "for 0 pending jobs" in bloated.message
    assert bloated.details["bytes"] >= full.details["bytes"]
    # Under the default 50 MB floor it is not worth a warning.
    assert findings(pg_dsn, schema)["claim_index"].status == "ok"

    db.execute(bloated.fix.split(";")[0])  # REINDEX INDEX CONCURRENTLY ...
    assert findings(pg_dsn, schema, **small)["claim_index"].status == "ok"


# -- retention -----------------------------------------------------------------------------


def test_finished_jobs_past_retention_are_reported(app: App, db: Any) -> None:
    jobs = table(app.schema)
    db.execute(
        sql.SQL(
            "INSERT INTO {} (queue, task, payload, status, finished_at) "
            "SELECT 'q', 't', '{{}}', s, now() - make_interval(days => d) "
            "FROM (VALUES ('done', 3, 5), ('failed', 8, 2), ('failed', 1, 4), "
            "             ('cancelled', 0, 1)) AS v(s, d, n), generate_series(1, v.n)"
        ).format(jobs)
    )
    found = findings(app.dsn, app.schema)["retention"]
    assert found.status == "warn", found
    counts = {r["status"]: r["n"] for r in found.details["statuses"]}
    assert counts == {"done": 5, "failed": 2, "cancelled": 0}
    assert "5 done jobs older than" in found.message and "2 failed jobs" in found.message
    assert "oldest 8.0d" in found.message
    assert "skiplock prune" in found.fix

    # Kept on purpose: the app's retention says so.
    keep = {"done": None, "failed": None, "cancelled": DEFAULT_RETENTION["cancelled"]}
    kept = findings(app.dsn, app.schema, retention=keep)["retention"]
    assert kept.status == "ok" and "done, failed kept forever" in kept.message

    result = run_cli(
        "doctor", "--dsn", app.dsn, "--schema", app.schema, "--json",
        "--retention", "done=none", "--retention", "failed=none",
    )  # fmt: skip
    [ret] = [f for f in json.loads(result.stdout)["findings"] if f["check"] == "retention"]
    assert ret["status"] == "ok", ret

    assert app.sync_client.prune(dict(DEFAULT_RETENTION)) == {
        "done": 5, "cancelled": 0, "failed": 2, "archive": 0,
    }  # fmt: skip
    assert findings(app.dsn, app.schema)["retention"].status == "ok"


def test_bad_retention_option_is_a_usage_error(pg_dsn: str, schema: str) -> None:
    result = run_cli("doctor", "--dsn", pg_dsn, "--schema", schema, "--retention", "done=soon")
    assert result.returncode == 2 and "not a number of seconds" in result.stderr
    result = run_cli("doctor", "--dsn", pg_dsn, "--schema", schema, "--retention", "pending=1")
    assert result.returncode == 2 and "STATUS=SECONDS" in result.stderr


# -- LISTEN --------------------------------------------------------------------------------


def test_listen_probe_succeeds_on_a_direct_connection(pg_dsn: str, schema: str) -> None:
    found = Doctor(pg_dsn, schema).check_listen()
    assert found.status == "ok", found
    assert 0 <= found.details["seconds"] < 1.0


def test_listen_probe_reports_notifications_that_never_arrive(
    pg_dsn: str, schema: str, db: Any
) -> None:
    """What a transaction pooler does (the NOTIFY goes out on a session other than the
    LISTENing one and never reaches it) is made real without a pooler: the notification is
    sent in another database of the same server, where no listener of this one hears it.  That
    database is made here: the test's own may be any one, ``postgres`` included (the embedded
    server's)."""
    other = f"skiplock_doctor_{secrets.token_hex(4)}"
    db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(other)))
    try:
        elsewhere = conninfo.make_conninfo(pg_dsn, dbname=other)
        doctor = Doctor(pg_dsn, schema, Thresholds(listen_timeout=0.5))
        started = time.monotonic()
        found = doctor.check_listen(notify_dsn=elsewhere)
    finally:
        db.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(other)))
    assert time.monotonic() - started >= 0.5
    assert found.status == "warn", found
    assert "did not arrive" in found.message and "pooler" in found.message
    assert "--poll-only" in found.fix


# -- connections ---------------------------------------------------------------------------


def test_connection_headroom_counts_real_sessions(pg_dsn: str, schema: str) -> None:
    before = findings(pg_dsn, schema)["connections"]
    assert before.status == "ok", before  # this server has room for two more workers
    extra = [psycopg.connect(pg_dsn, application_name="skiplock-listener") for _ in range(3)]
    try:
        during = findings(pg_dsn, schema)["connections"].details
        assert during["listeners"] >= 3 and during["skiplock_sessions"] >= 3
        free = during["free"]
        assert free == during["max_connections"] - during["reserved"] - during["in_use"]
        # With workers needing more slots than are free: no room for even one.
        tight = findings(pg_dsn, schema, connections_per_worker=free + 5)["connections"]
        assert tight.status == "fail" and "room for about 0 more" in tight.message, tight
        assert "max_connections" in tight.fix
        one = findings(pg_dsn, schema, connections_per_worker=free)["connections"]
        assert one.status in ("warn", "fail"), one  # room for one (none if a session came)
    finally:
        for conn in extra:
            conn.close()


# -- command line --------------------------------------------------------------------------


def test_cli_errors_are_one_line(pg_dsn: str) -> None:
    bad = run_cli("doctor", "--dsn", pg_dsn, "--schema", 'x"; DROP TABLE y; --')
    assert bad.returncode == 1 and bad.stderr.startswith("error: invalid schema name")
    down = run_cli("doctor", "--dsn", "postgresql://postgres@127.0.0.1:1/test", "--schema", "s")
    assert down.returncode == 1 and down.stderr.startswith("error: cannot connect")
    assert len(down.stderr.strip().splitlines()) == 1
