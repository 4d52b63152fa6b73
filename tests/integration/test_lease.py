"""Lease model against a real server: expiry, reclaim, heartbeats and ownership of a claim.

The store is driven directly (one statement per call) so that every step is deterministic; the
last test runs a real Worker whose job is reclaimed from under it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from helpers.polling import comes_true_async
from helpers.stores import SyncStore
from skiplock import App, Claim, JobStatus, Worker
from skiplock._db.records import FailedAttempt, Snooze, TaskResult

pytestmark = pytest.mark.smoke

Row = dict[str, Any]
MICROSECOND = timedelta(microseconds=1)


def jobs_table(app: App) -> str:
    return f'"{app.schema}".jobs'


def row(app: App, job_id: int) -> Row | None:
    with psycopg.connect(app.dsn, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(f"SELECT * FROM {jobs_table(app)} WHERE id = %s", (job_id,)).fetchone()


def lease_end(app: App, job_id: int) -> datetime:
    """When the job's lease ends (its ``locked_until``): the statements that compare with the
    time are run at a pinned ``now`` around it, instead of sleeping until it has passed."""
    found = row(app, job_id)
    assert found is not None and found["locked_until"] is not None
    end: datetime = found["locked_until"]
    return end


def test_expired_lease_is_reclaimed_and_the_stale_claim_changes_nothing(
    app: App, store: SyncStore
) -> None:
    @app.task(name="work")
    def work() -> None: ...

    job_id = work.enqueue().id
    s = store
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        [first] = s.job_claim(conn, ["default"], 1, "w1", 30)
        assert (first.id, first.attempts, first.locked_by) == (job_id, 1, "w1")
        stale = first.claim
        claimed_at = conn.execute(
            f"SELECT locked_at FROM {jobs_table(app)} WHERE id = %s", (job_id,)
        ).fetchone()
        assert claimed_at is not None
        assert stale == Claim(job_id, 1, "w1", claimed_at[0])

        # Not expired yet (now, nor at the lease's last instant): nothing to reclaim.
        end = lease_end(app, job_id)
        assert end - claimed_at[0] == timedelta(seconds=30)
        assert s.job_reclaim_expired(conn) == {}
        assert s.job_reclaim_expired(conn, now=end) == {}
        assert s.job_reclaim_expired(conn, now=end + MICROSECOND) == {job_id: "pending"}
        reclaimed = row(app, job_id)
        assert reclaimed is not None
        assert reclaimed["status"] == "pending"
        assert reclaimed["attempts"] == 1  # the lost attempt stays counted
        assert reclaimed["locked_until"] is None
        assert reclaimed["finished_at"] is None
        assert "lease expired" in reclaimed["last_error"]
        assert "w1" in reclaimed["last_error"]
        # A second reclaim finds nothing more.
        assert s.job_reclaim_expired(conn, now=end + timedelta(hours=1)) == {}

        [second] = s.job_claim(conn, ["default"], 1, "w2", 30)
        assert (second.id, second.attempts, second.locked_by) == (job_id, 2, "w2")
        before = row(app, job_id)

        # Every state change through the stale claim is refused and leaves the row alone.
        for completion in ("keep", "delete", "archive"):
            assert s.job_finish_many(conn, [stale], completion) == set()
        assert s.job_fail_many(conn, [FailedAttempt(stale, "stale failure", 5.0)]) == {}
        assert s.job_fail_many(conn, [FailedAttempt(stale, "stale final failure", None)]) == {}
        assert s.job_snooze_many(conn, [Snooze(stale, 0.0)]) == set()
        assert s.job_extend_leases(conn, [stale], 3600) == {}
        assert row(app, job_id) == before
        archived = conn.execute(
            f'SELECT count(*) FROM "{app.schema}".jobs_archive WHERE id = %s', (job_id,)
        ).fetchone()
        assert archived == (0,)

        # The new owner still can finish.
        assert s.job_finish_many(conn, [second.claim], "keep") == {job_id}
    done = row(app, job_id)
    assert done is not None
    assert (done["status"], done["attempts"], done["locked_by"]) == ("done", 2, "w2")
    assert done["finished_at"] is not None


def test_heartbeat_extends_only_an_owned_lease_and_keeps_it_from_reclaim(
    app: App, store: SyncStore
) -> None:
    @app.task(name="work")
    def work() -> None: ...

    job_id = work.enqueue().id
    other_id = work.enqueue().id  # stays pending: a heartbeat must not touch it
    s = store
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        [job] = s.job_claim(conn, ["default"], 1, "w1", 0.5)
        assert job.id == job_id
        original_end = lease_end(app, job_id)
        initial = row(app, job_id)
        assert initial is not None

        # Foreign, wrong-attempt or wrong-time heartbeats change nothing.
        at = job.claim.claimed_at
        assert s.job_extend_leases(conn, [Claim(job_id, 1, "w2", at)], 60) == {}
        assert s.job_extend_leases(conn, [Claim(job_id, 2, "w1", at)], 60) == {}
        assert s.job_extend_leases(conn, [Claim(job_id, 1, "w1", at - MICROSECOND)], 60) == {}
        assert s.job_extend_leases(conn, [Claim(other_id, 0, "w1", at)], 60) == {}
        assert row(app, job_id) == initial

        assert s.job_extend_leases(conn, [job.claim], 60) == {job_id: False}
        extended = row(app, job_id)
        assert extended is not None
        assert extended["locked_until"] > initial["locked_until"]
        remaining = conn.execute(
            f"SELECT extract(epoch FROM locked_until - now()) FROM {jobs_table(app)} WHERE id = %s",
            (job_id,),
        ).fetchone()
        assert remaining is not None and 50 < float(remaining[0]) <= 60
        # Nothing else about the claim moved.
        assert {k: v for k, v in extended.items() if k != "locked_until"} == {
            k: v for k, v in initial.items() if k != "locked_until"
        }

        # Past the original 0.5 s lease, the extended one holds.
        assert s.job_reclaim_expired(conn, now=original_end + timedelta(seconds=1)) == {}
        still = row(app, job_id)
        assert still is not None
        assert (still["status"], still["locked_by"], still["attempts"]) == ("running", "w1", 1)

        # A heartbeat at a pinned time counts the lease from it.
        pinned = original_end + timedelta(hours=1)
        assert s.job_extend_leases(conn, [job.claim], 60, now=pinned) == {job_id: False}
        assert lease_end(app, job_id) == pinned + timedelta(seconds=60)
        assert s.job_reclaim_expired(conn, now=pinned + timedelta(seconds=60)) == {}
        assert s.job_finish_many(conn, [job.claim], "keep") == {job_id}
    other = row(app, other_id)
    assert other is not None and other["status"] == "pending" and other["locked_until"] is None


def test_reclaim_fails_a_job_whose_attempts_are_spent(app: App, store: SyncStore) -> None:
    @app.task(name="once", max_attempts=1)
    def once() -> None: ...

    job_id = once.enqueue().id
    s = store
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        [job] = s.job_claim(conn, ["default"], 1, "w1", 30)
        assert (job.attempts, job.max_attempts) == (1, 1)
        expired_at = lease_end(app, job_id) + MICROSECOND
        assert s.job_reclaim_expired(conn, now=expired_at) == {job_id: "failed"}
        failed = row(app, job_id)
        assert failed is not None
        assert failed["status"] == "failed"
        assert failed["attempts"] == 1
        assert failed["finished_at"] == expired_at
        assert failed["locked_until"] is None
        assert "lease expired" in failed["last_error"]
        assert "w1" in failed["last_error"]
        # Terminal: not claimable, not reclaimed again, and the old claim cannot revive it.
        assert s.job_claim(conn, ["default"], 10, "w2", 30) == []
        assert s.job_reclaim_expired(conn, now=expired_at + timedelta(hours=1)) == {}
        assert s.job_finish_many(conn, [job.claim], "keep") == set()
        assert row(app, job_id) == failed


def test_only_the_claiming_worker_can_change_its_job(app: App, store: SyncStore) -> None:
    @app.task(name="work")
    def work() -> None: ...

    job_id = work.enqueue().id
    s = store
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        [job] = s.job_claim(conn, ["default"], 1, "w1", 30)
        before = row(app, job_id)
        own = job.claim
        impostors = [
            own._replace(worker="w2"),
            own._replace(attempt=own.attempt + 1),
            own._replace(claimed_at=own.claimed_at + MICROSECOND),
        ]
        for impostor in impostors:
            for completion in ("keep", "delete", "archive"):
                assert s.job_finish_many(conn, [impostor], completion) == set()
            assert s.job_fail_many(conn, [FailedAttempt(impostor, "nope", None)]) == {}
            assert s.job_snooze_many(conn, [Snooze(impostor, 0.0)]) == set()
            assert s.job_extend_leases(conn, [impostor], 60) == {}
        assert row(app, job_id) == before
        assert s.job_finish_many(conn, [job.claim], "keep") == {job_id}
    after = row(app, job_id)
    assert after is not None and after["status"] == "done"


@pytest.mark.parametrize("how", ["forgotten in a crash", "given back unstarted"])
def test_a_job_claimed_again_with_the_same_worker_and_attempt_is_another_claim(
    app: App, store: SyncStore, how: str
) -> None:
    """A worker and attempt number can repeat: a leased claim commits without waiting for its
    WAL flush, so a server crash can forget it and its attempt with it; a job given back
    unstarted has its attempt unspent.  Claimed again by the same worker, the job has a new
    claim, which no write naming the old one may change."""

    @app.task(name="work")
    def work() -> None: ...

    job_id = work.enqueue().id
    s = store
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        [first] = s.job_claim(conn, ["default"], 1, "w1", 30)
        if how == "given back unstarted":
            assert s.job_release_many(conn, [first.claim]) == {job_id}
        else:  # the row as it was before the claim, which the crash undid
            conn.execute(
                f"UPDATE {jobs_table(app)} SET status = 'pending', attempts = 0, locked_by = NULL,"
                " locked_at = NULL, locked_until = NULL WHERE id = %s",
                (job_id,),
            )
        [second] = s.job_claim(conn, ["default"], 1, "w1", 30)
        old, new = first.claim, second.claim
        assert new[:3] == old[:3] == (job_id, 1, "w1")
        assert new.claimed_at > old.claimed_at
        before = row(app, job_id)

        for completion in ("keep", "delete", "archive"):
            assert s.job_finish_many(conn, [old], completion) == set()
        s.job_record_results(conn, [TaskResult(old, '"stale"')])
        assert s.job_finish_with_results_many(conn, [TaskResult(old, '"stale"')], "keep") == set()
        assert s.job_fail_many(conn, [FailedAttempt(old, "stale failure", 5.0)]) == {}
        assert s.job_fail_many(conn, [FailedAttempt(old, "stale final failure", None)]) == {}
        assert s.job_snooze_many(conn, [Snooze(old, 0.0)]) == set()
        assert s.job_extend_leases(conn, [old], 3600) == {}
        assert s.job_cancel_claimed_many(conn, [old]) == set()
        assert s.job_release_many(conn, [old]) == set()
        assert s.job_count_dead_attempts(conn, old, 2, "stale count") is False
        assert row(app, job_id) == before

        assert s.job_finish_many(conn, [new], "keep") == {job_id}
    done = row(app, job_id)
    assert done is not None and (done["status"], done["attempts"]) == ("done", 1)


def test_worker_whose_lease_is_reclaimed_reports_it_lost_and_keeps_going(
    app: App, store: SyncStore
) -> None:
    events: dict[str, asyncio.Event] = {}
    runs: list[int] = []

    @app.task(name="slow", pass_context=True)
    async def slow(ctx: Any) -> None:
        runs.append(ctx.job.attempts)
        events["started"].set()
        await events["release"].wait()

    job_id = slow.enqueue().id
    s = store

    def steal() -> dict[int, str]:
        # Expire, reclaim and re-claim in one transaction, so the worker's heartbeat cannot
        # slip in between and the row goes straight from the worker to the thief.
        with psycopg.connect(app.dsn) as conn:
            conn.execute(
                f"UPDATE {jobs_table(app)} SET locked_until = now() - interval '1 second' "
                "WHERE id = %s",
                (job_id,),
            )
            reclaimed = s.job_reclaim_expired(conn)
            taken = s.job_claim(conn, ["default"], 1, "thief", 30)
            assert [(j.id, j.attempts) for j in taken] == [(job_id, 2)]
        return reclaimed

    async def main() -> tuple[Worker, dict[int, str], Row | None]:
        events["started"] = asyncio.Event()
        events["release"] = asyncio.Event()
        worker = Worker(app, concurrency=1, lease_seconds=1.0, poll_interval=0.1)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(events["started"].wait(), 15)
        reclaimed = await asyncio.to_thread(steal)
        # Let a heartbeat or two see the loss before the task ends.
        await asyncio.sleep(0.8)
        events["release"].set()
        # Wait until the worker has tried (and failed) to save its result.
        await comes_true_async(lambda: worker.stats.lost != 0, 15, step=0.05)
        middle = await asyncio.to_thread(row, app, job_id)
        worker.stop()
        await asyncio.wait_for(running, 15)
        return worker, reclaimed, middle

    worker, reclaimed, middle = asyncio.run(main())
    assert reclaimed == {job_id: "pending"}
    assert runs == [1]
    assert worker.stats.lost == 1
    assert (worker.stats.claimed, worker.stats.done, worker.stats.failed) == (1, 0, 0)
    # The worker's late "done" changed nothing: the thief still owns the job.
    assert middle is not None
    assert (middle["status"], middle["locked_by"], middle["attempts"]) == ("running", "thief", 2)
    assert middle["finished_at"] is None
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        thief = app.get_job(job_id)
        assert thief is not None and thief.claim[:3] == (job_id, 2, "thief")
        assert s.job_finish_many(conn, [thief.claim], "keep") == {job_id}
    final = app.get_job(job_id)
    assert final is not None
    assert (final.status, final.locked_by, final.attempts) == (JobStatus.DONE, "thief", 2)
