"""Progress of a running job (``ctx.progress``, migration 0019's job_progress): reported by a
task in either worker model, written at most once a second by its worker, only through a claim
that still owns the job, and shown while the job runs by the client, `skiplock jobs show` and
the dashboard's job page and API."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from typing import Any

import psycopg
import pytest

from helpers.dashboard_client import Browser, serving
from helpers.polling import wait_for_async
from helpers.stores import SyncStore
from skiplock import App, JobContext, Worker
from skiplock._db.records import ProgressReport


def reported(app: App, job_id: int) -> dict[str, Any] | None:
    job = app.sync_client.get_job(job_id)
    assert job is not None
    return app.sync_client.progress(job)


def jobs_show(app: App, job_id: int, *extra: str) -> str:
    argv = [sys.executable, "-m", "skiplock", "jobs", "show", str(job_id), "--dsn", app.dsn,
            "--schema", app.schema, *extra]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_running_job_reports_progress_shown_live_until_it_ends(app: App, model: str) -> None:
    release = threading.Event()

    @app.task(name="pages", pass_context=True)
    async def pages(ctx: JobContext) -> None:
        ctx.progress(0.1, "page 1 of 10")
        ctx.progress(0.4, "page 4 of 10")  # the same second: only the last one is written
        await asyncio.to_thread(release.wait, 30)

    job_id = pages.enqueue().id
    worker = Worker(app, model=model, poll_interval=0.05)  # type: ignore[arg-type]

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            shown = await wait_for_async(
                lambda: asyncio.to_thread(reported, app, job_id), 10.0, "no progress shown"
            )
            assert shown is not None
            assert (shown["fraction"], shown["status"]) == (0.4, "page 4 of 10")
            assert shown["worker"] == worker.worker_id and shown["attempt"] == 1
            text = await asyncio.to_thread(jobs_show, app, job_id)
            assert "progress: 40% page 4 of 10" in text, text
            as_json = json.loads(await asyncio.to_thread(jobs_show, app, job_id, "--json"))
            assert as_json["progress"]["fraction"] == 0.4
            assert as_json["progress"]["status"] == "page 4 of 10"
            release.set()
            await wait_for_async(
                lambda: asyncio.to_thread(
                    lambda: app.sync_client.get_job(job_id).status == "done"  # type: ignore[union-attr]
                ),
                10.0,
                "the job did not finish",
            )
        finally:
            release.set()
            worker.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    assert reported(app, job_id) is None  # dropped with the job's outcome
    as_json = json.loads(jobs_show(app, job_id, "--json"))
    assert as_json["progress"] is None


def test_the_dashboard_job_page_and_api_show_the_progress(app: App) -> None:
    release = threading.Event()

    @app.task(name="pages", pass_context=True)
    def pages(ctx: JobContext) -> None:  # a sync task: the same context, from its thread
        ctx.progress(0.25, "<b>quarter</b>")
        release.wait(30)

    job_id = pages.enqueue().id
    worker = Worker(app, poll_interval=0.05)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(
                lambda: asyncio.to_thread(reported, app, job_id), 10.0, "no progress shown"
            )

            def look() -> None:
                with serving(app) as base:
                    browser = Browser(base)
                    browser.log_in()
                    api = json.loads(browser.get(f"/api/jobs/{job_id}").text)
                    assert api["status"] == "running"
                    assert api["progress"]["fraction"] == 0.25
                    assert api["progress"]["status"] == "<b>quarter</b>"
                    page = browser.get(f"/jobs/{job_id}").text
                    assert f'/api/jobs/{job_id}" data-key="id"' in page
                    assert 'data-field="progress.fraction">25%<' in page, page
                    assert "&lt;b&gt;quarter&lt;/b&gt;" in page and "<b>quarter" not in page

            await asyncio.to_thread(look)
        finally:
            release.set()
            worker.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main())


def test_reports_are_written_at_most_once_a_second_a_job(app: App, db: Any) -> None:
    table = f'"{app.schema}".job_progress'
    db.execute(f'CREATE TABLE "{app.schema}".progress_writes (progress float8)')
    db.execute(
        f'CREATE FUNCTION "{app.schema}".count_progress() RETURNS trigger LANGUAGE plpgsql AS $$'
        f' BEGIN INSERT INTO "{app.schema}".progress_writes VALUES (NEW.progress); RETURN NEW;'
        " END $$"
    )
    db.execute(
        f"CREATE TRIGGER counted AFTER INSERT OR UPDATE ON {table}"
        f' FOR EACH ROW EXECUTE FUNCTION "{app.schema}".count_progress()'
    )

    @app.task(name="chatty", pass_context=True)
    async def chatty(ctx: JobContext) -> None:
        for n in range(1, 251):  # 250 reports over about 2.5 s
            ctx.progress(n / 250, f"{n} of 250")
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.5)  # long enough for the last report to be written

    chatty.enqueue()

    async def main() -> None:
        await asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30)

    asyncio.run(main())
    writes = [r[0] for r in db.execute(f'SELECT progress FROM "{app.schema}".progress_writes')]
    assert 2 <= len(writes) <= 5, writes  # about 4 s of running, one write a second at most
    assert writes == sorted(writes) and writes[-1] == 1.0


def test_a_stale_leased_claim_cannot_write_progress(app: App, store: SyncStore) -> None:
    @app.task(name="work")
    def work() -> None: ...

    job_id = work.enqueue().id
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        [first] = store.job_claim(conn, ["default"], 1, "w1", 30)
        assert store.job_progress_write(conn, [ProgressReport(first.claim, 0.5, "mine")]) == {
            job_id
        }
        conn.execute(
            f"UPDATE \"{app.schema}\".jobs SET locked_until = now() - interval '1 second'"
            " WHERE id = %s",
            (job_id,),
        )
        assert store.job_reclaim_expired(conn) == {job_id: "pending"}
        [second] = store.job_claim(conn, ["default"], 1, "w2", 30)
        assert second.attempts == 2
        stale = ProgressReport(first.claim, 0.9, "stale")
        assert store.job_progress_write(conn, [stale]) == set()
        assert reported(app, job_id) is None  # the old attempt's row is not the running one's
        assert store.job_progress_write(conn, [ProgressReport(second.claim, 0.1, "new")]) == {
            job_id
        }
        shown = reported(app, job_id)
        assert shown is not None and (shown["fraction"], shown["worker"]) == (0.1, "w2")


def test_only_the_session_holding_a_held_claim_can_write_its_progress(
    app: App, store: SyncStore
) -> None:
    @app.task(name="work")
    def work() -> None: ...

    job_id = work.enqueue().id
    with (
        psycopg.connect(app.dsn, autocommit=True) as holder,
        psycopg.connect(app.dsn, autocommit=True) as side,
    ):
        job = store.job_claim_held(holder, ["default"], "w", 30.0)
        assert job is not None and job.id == job_id
        pid = holder.info.backend_pid
        mine = ProgressReport(job.claim, 0.3, "held", held_pid=pid)
        # From a side connection while the row is locked: no wait, and seen at once.
        assert store.job_progress_write(side, [mine]) == {job_id}
        shown = reported(app, job_id)
        assert shown is not None and (shown["fraction"], shown["status"]) == (0.3, "held")
        other = ProgressReport(job.claim, 0.6, "not mine", held_pid=side.info.backend_pid)
        assert store.job_progress_write(side, [other]) == set()
        holder.rollback()  # the claim is gone with its transaction
        assert store.job_progress_write(side, [mine]) == set()


def test_progress_out_of_bounds_is_refused_at_the_call_and_by_the_table(app: App, db: Any) -> None:
    from skiplock._runtime.progress import checked_progress

    for bad in (-0.01, 1.01, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="progress must be from 0 to 1"):
            checked_progress(bad, None)
    with pytest.raises(TypeError):
        checked_progress("half", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 200 characters"):
        checked_progress(0.5, "x" * 201)
    assert checked_progress(1, "x" * 200) == (1.0, "x" * 200)
    table = f'"{app.schema}".job_progress'
    for value, status, constraint in [
        (1.5, None, "jobs_bound_progress"),
        (0.5, "x" * 201, "jobs_bound_progress_status"),
    ]:
        with pytest.raises(psycopg.errors.CheckViolation, match=constraint):
            db.execute(
                f"INSERT INTO {table} (job_id, attempt, worker, progress, status)"
                " VALUES (1, 1, 'w', %s, %s)",
                (value, status),
            )


def test_the_leader_prunes_progress_of_jobs_that_no_longer_run_it(
    app: App, store: SyncStore
) -> None:
    @app.task(name="work")
    def work() -> None: ...

    done_id, held_id = (e.id for e in work.enqueue_many([{}, {}]))
    with (
        psycopg.connect(app.dsn, autocommit=True) as conn,
        psycopg.connect(app.dsn, autocommit=True) as holder,
    ):
        [leased] = store.job_claim(conn, ["default"], 1, "w1", 30)
        held = store.job_claim_held(holder, ["default"], "w2", 30.0)
        assert (leased.id, held is not None and held.id) == (done_id, held_id)
        assert held is not None
        reports = [
            ProgressReport(leased.claim, 0.5, None),
            ProgressReport(held.claim, 0.5, None, held_pid=holder.info.backend_pid),
        ]
        assert store.job_progress_write(conn, reports) == {done_id, held_id}
        assert store.job_progress_prune(conn, keep_seconds=0) == 0  # both still run
        assert store.job_complete_many(conn, [leased.claim]) == {done_id}
        assert store.job_progress_prune(conn, keep_seconds=60) == 0  # too young yet
        assert store.job_progress_prune(conn, keep_seconds=0) == 1
        assert store.job_progress_get(conn, held_id) is not None
        holder.rollback()
        assert store.job_progress_prune(conn, keep_seconds=0) == 1
