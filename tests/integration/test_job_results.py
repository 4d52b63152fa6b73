"""What tasks return, kept on their done jobs (``store_result=True``), and waiting for a job."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.stores import SyncStore
from skiplock import App, ConfigurationError, JobContext, JobStatus, Worker
from skiplock._db.records import TaskResult
from skiplock.job import Claim


def burst(app: App, **options: Any) -> None:
    asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05, **options).run(), 30))


def test_done_jobs_keep_what_their_tasks_returned(app: App, db: Any) -> None:
    @app.task(name="add", store_result=True)
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @app.task(name="words", store_result=True)
    async def words(text: str) -> list[str]:
        return text.split()

    @app.task(name="nothing", store_result=True)
    def nothing() -> None: ...

    @app.task(name="unstored")
    def unstored() -> int:
        return 42

    jobs = {
        "add": add.enqueue(a=2, b=3).id,
        "words": words.enqueue(text="to be or not").id,
        "nothing": nothing.enqueue().id,
        "unstored": unstored.enqueue().id,
    }
    burst(app)
    results = {name: app.get_job(job_id) for name, job_id in jobs.items()}
    assert {name: job.status for name, job in results.items() if job} == dict.fromkeys(
        jobs, JobStatus.DONE
    )
    assert {name: job.result for name, job in results.items() if job} == {
        "add": {"sum": 5},
        "words": ["to", "be", "or", "not"],
        "nothing": None,
        "unstored": None,  # only tasks that ask for it keep their return value
    }
    listed = {j.id: j.result for j in app.sync_client.list_jobs(task="add")}
    assert listed == {jobs["add"]: {"sum": 5}}
    stored = db.execute(
        sql.SQL("SELECT result FROM {} WHERE id = %s").format(sql.Identifier(app.schema, "jobs")),
        (jobs["add"],),
    ).fetchone()
    assert stored == ({"sum": 5},)


def test_a_result_that_cannot_be_stored_fails_the_attempt(app: App) -> None:
    @app.task(name="odd", store_result=True, max_attempts=1)
    async def odd() -> object:
        return 1j  # no serializer's JSON (a set is an array now)

    @app.task(name="huge", store_result=True, max_attempts=1)
    def huge() -> str:
        return "x" * (app.max_payload_bytes + 1)

    odd_id, huge_id = odd.enqueue().id, huge.enqueue().id
    burst(app)
    odd_job, huge_job = app.get_job(odd_id), app.get_job(huge_id)
    assert odd_job is not None and huge_job is not None
    assert (odd_job.status, huge_job.status) == (JobStatus.FAILED, JobStatus.FAILED)
    assert odd_job.last_error is not None and huge_job.last_error is not None
    assert odd_job.last_error.startswith(
        "InvalidPayload: the return value of task 'odd' is not JSON-serialisable"
    )
    assert "over the limit" in huge_job.last_error and huge_job.result is None


def test_a_held_task_whose_result_cannot_be_stored_undoes_its_writes(app: App, db: Any) -> None:
    table = sql.Identifier(app.schema, "effects")
    db.execute(sql.SQL("CREATE TABLE {} (job_id bigint)").format(table))

    @app.task(name="write", model="held", pass_context=True, store_result=True, max_attempts=1)
    async def write(ctx: JobContext, good: bool) -> Any:
        assert ctx.conn is not None
        await ctx.conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (ctx.job.id,))
        return {"wrote": ctx.job.id} if good else object()

    good, bad = write.enqueue(good=True).id, write.enqueue(good=False).id
    burst(app)
    assert [r[0] for r in db.execute(sql.SQL("SELECT job_id FROM {}").format(table))] == [good]
    good_job, bad_job = app.get_job(good), app.get_job(bad)
    assert good_job is not None and bad_job is not None
    assert (good_job.status, good_job.result) == (JobStatus.DONE, {"wrote": good})
    assert bad_job.status is JobStatus.FAILED  # and its insert rolled back with the savepoint


def test_archived_jobs_keep_their_results(pg_dsn: str, schema: str, db: Any) -> None:
    app = App(pg_dsn, schema, completion="archive")
    try:

        @app.task(name="square", store_result=True)
        def square(n: int) -> int:
            return n * n

        job_id = square.enqueue(n=12).id
        burst(app)
        row = db.execute(
            sql.SQL("SELECT status, result FROM {} WHERE id = %s").format(
                sql.Identifier(schema, "jobs_archive")
            ),
            (job_id,),
        ).fetchone()
        assert row == ("done", 144)
        # Read back from the archive, as from the jobs table: the job, its result, its list.
        job = app.wait_for_job(job_id, timeout=5)
        assert (job.id, job.status, job.result, job.locked_until) == (
            job_id, JobStatus.DONE, 144, None,
        )  # fmt: skip
        pending = square.enqueue(n=3).id  # newer, still in the jobs table
        listed = app.sync_client.list_jobs(task="square")
        assert [(j.id, j.status) for j in listed] == [
            (pending, JobStatus.PENDING), (job_id, JobStatus.DONE),
        ]  # fmt: skip
        assert [j.id for j in app.sync_client.list_jobs(status="done")] == [job_id]
        assert app.sync_client.list_jobs(task="square", before=job_id) == []
        assert [j.id for j in app.sync_client.list_jobs(task="square", limit=1)] == [pending]
    finally:
        app.close()


def test_store_result_is_refused_when_done_jobs_are_deleted(pg_dsn: str, schema: str) -> None:
    app = App(pg_dsn, schema, completion="delete")
    try:
        with pytest.raises(ConfigurationError, match="deletes done jobs"):

            @app.task(name="lost", store_result=True)
            def lost() -> int:
                return 1
    finally:
        app.close()


def test_a_stale_claim_stores_no_result(app: App, store: SyncStore, db: Any) -> None:
    @app.task(name="t", store_result=True)
    def t() -> int:
        return 1

    job_id = t.enqueue().id
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        (job,) = store.job_claim(conn, ["default"], 1, "w-old", 30.0)
        # The lease was reclaimed and another worker claimed the job (attempt 2).
        db.execute(
            sql.SQL(
                "UPDATE {} SET locked_by = 'w-new', attempts = 2,"
                " locked_at = locked_at + interval '1 second' WHERE id = %s"
            ).format(sql.Identifier(app.schema, "jobs")),
            (job_id,),
        )
        reclaimed = app.get_job(job_id)
        assert reclaimed is not None
        old, new = job.claim, reclaimed.claim
        assert new == Claim(job_id, 2, "w-new", old.claimed_at + timedelta(seconds=1))
        store.job_record_results(conn, [TaskResult(new, '"fresh"')])  # (before an archive)
        store.job_record_results(conn, [TaskResult(old, '"stale"')])
        assert (
            store.job_finish_with_results_many(conn, [TaskResult(old, '"stale"')], "keep") == set()
        )
        seen = app.get_job(job_id)
        assert seen is not None and (seen.status, seen.result) == (JobStatus.RUNNING, "fresh")
        assert store.job_finish_with_results_many(conn, [TaskResult(new, '"done"')], "keep") == {
            job_id
        }
    done = app.get_job(job_id)
    assert done is not None and (done.status, done.result) == (JobStatus.DONE, "done")


def test_wait_for_job_returns_the_finished_job_or_says_why_not(app: App) -> None:
    @app.task(name="slow", store_result=True)
    async def slow(n: int) -> int:
        await asyncio.sleep(0.3)
        return n + 1

    job_id = slow.enqueue(n=41).id
    with pytest.raises(TimeoutError, match=f"job {job_id} is still pending after 0.2s"):
        app.wait_for_job(job_id, timeout=0.2)
    with pytest.raises(LookupError, match="no job 999999999"):
        app.wait_for_job(999_999_999, timeout=1)

    worker = threading.Thread(target=burst, args=(app,))
    worker.start()
    try:
        done = app.wait_for_job(job_id, timeout=20, poll=0.02)
        assert (done.status, done.result) == (JobStatus.DONE, 42)
        again = asyncio.run(app.wait_for_job_async(job_id, timeout=1))
        assert again.result == 42
    finally:
        worker.join(timeout=30)
