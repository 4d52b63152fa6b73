"""The backend contract (skiplock.backends.base.Backend), semantic by semantic, run against every
backend (the ``harness`` fixture).  The tests see a backend only through the protocol: no SQL,
no look at its tables.  Times are pinned through ``now`` at the boundaries the backend itself
reports (a job's ``locked_until``, its ``run_at``), so nothing sleeps.  docs/backends.md lists
each semantic with its test.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from helpers.backends import Harness, check_claimed_once, new_job, run
from skiplock.backends import (
    Backend,
    FailedAttempt,
    NewJobs,
    PostgresBackend,
    Snooze,
    TaskResult,
)
from skiplock.job import Job, JobStatus

MICROSECOND = timedelta(microseconds=1)
RUNNING, PENDING, SCHEDULED = JobStatus.RUNNING, JobStatus.PENDING, JobStatus.SCHEDULED
DONE, FAILED, CANCELLED = JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED


async def the_job(backend: Backend, job_id: int) -> Job:
    job = await backend.get_job(job_id)
    assert job is not None, f"job {job_id} is gone"
    return job


async def claim_one(backend: Backend, worker: str = "w1", lease: float = 30) -> Job:
    jobs = await backend.claim(["q"], 1, worker, lease)
    assert len(jobs) == 1, jobs
    return jobs[0]


def test_the_postgres_backend_is_a_backend() -> None:
    backend = PostgresBackend("postgresql://unused", "unused")  # connects on first use only
    assert isinstance(backend, Backend)


# -- enqueue ---------------------------------------------------------------------------------


def test_enqueue_makes_pending_or_scheduled_jobs(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        now, later = await b.enqueue([new_job(payload={"n": 1}), new_job(delay=3600)])
        assert not now.deduplicated and not later.deduplicated
        job = await the_job(b, now.id)
        assert (job.status, job.attempts, job.payload, job.queue) == (PENDING, 0, {"n": 1}, "q")
        assert (await the_job(b, later.id)).status == SCHEDULED
        assert [j.id for j in await b.claim(["q"], 10, "w1", 30)] == [now.id]

    run(harness, body)


def test_one_calls_jobs_as_new_jobs_are_one_job_per_payload(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        batch = NewJobs.repeated(new_job(priority=3, max_attempts=2), 3)
        batch = replace(batch, payloads='[{"n": 0}, {"n": 1}, {"n": 2}]', first_payload='{"n": 0}')
        enqueued = await b.enqueue(batch)
        assert len(enqueued) == 3 and not any(e.deduplicated for e in enqueued)
        jobs = [await the_job(b, e.id) for e in enqueued]
        assert [j.payload for j in jobs] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert {(j.priority, j.max_attempts, j.status) for j in jobs} == {(3, 2, PENDING)}
        assert await b.enqueue(NewJobs.repeated(new_job(), 0)) == []

    run(harness, body)


def test_enqueue_in_a_transaction_that_rolls_back_leaves_nothing(harness: Harness) -> None:
    class Rollback(Exception):
        pass

    async def body(b: Backend) -> None:
        with pytest.raises(Rollback):
            async with harness.transaction() as tx:
                [gone] = await b.enqueue([new_job()], transaction=tx)
                raise Rollback
        assert await b.get_job(gone.id) is None
        assert await b.claim(["q"], 10, "w1", 30) == []

        async with harness.transaction() as tx:
            [kept] = await b.enqueue([new_job()], transaction=tx)
            assert await b.get_job(kept.id) is None  # not before the commit
            assert await b.claim(["q"], 10, "w1", 30) == []
        assert (await the_job(b, kept.id)).status == PENDING
        assert [j.id for j in await b.claim(["q"], 10, "w1", 30)] == [kept.id]

    run(harness, body)


def test_an_idempotency_key_held_by_an_unfinished_job_makes_no_new_job(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [first] = await b.enqueue([new_job(idempotency_key="k")])
        [again] = await b.enqueue([new_job(idempotency_key="k")])
        assert (again.id, again.deduplicated) == (first.id, True)
        # Within one call: the first made, the others deduplicated.
        one, two = await b.enqueue([new_job(idempotency_key="k2"), new_job(idempotency_key="k2")])
        assert (one.deduplicated, two.id, two.deduplicated) == (False, one.id, True)
        # Running still holds the key; finished frees it.
        job = await claim_one(b)
        assert job.id == first.id
        [held] = await b.enqueue([new_job(idempotency_key="k")])
        assert (held.id, held.deduplicated) == (first.id, True)
        assert await b.complete([job.claim]) == {first.id}
        [fresh] = await b.enqueue([new_job(idempotency_key="k")])
        assert fresh.id != first.id and not fresh.deduplicated

    run(harness, body)


# -- claim -----------------------------------------------------------------------------------


def test_a_claim_runs_the_job_under_a_lease_and_counts_the_attempt(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job()])
        job = await claim_one(b, "w1", 30)
        assert (job.id, job.status, job.attempts, job.locked_by) == (e.id, RUNNING, 1, "w1")
        assert job.locked_at is not None and job.locked_until is not None
        assert job.locked_until - job.locked_at == timedelta(seconds=30)
        assert job.claim.job_id == e.id and job.claim.attempt == 1
        stored = await the_job(b, e.id)
        assert (stored.status, stored.attempts, stored.claim) == (RUNNING, 1, job.claim)
        assert await b.claim(["q"], 10, "w2", 30) == []  # running: not claimable again

    run(harness, body)


def test_concurrent_claims_never_hand_a_job_to_two_workers(harness: Harness) -> None:
    """Also across workers: of jobs sharing an entity key, none is claimed while one runs."""
    count, keyed, workers = 300, 10, 4

    async def claim_all(b: Backend, worker: str) -> list[int]:
        taken: list[int] = []
        while jobs := await b.claim(["q"], 7, worker, 30):
            taken += [j.id for j in jobs]
        return taken

    async def body(b: Backend) -> None:
        plain = await b.enqueue([new_job(payload={"i": i}) for i in range(count)])
        same_key = await b.enqueue([new_job(entity_key="e") for _ in range(keyed)])
        async with contextlib.AsyncExitStack() as stack:
            backends = [await stack.enter_async_context(harness.backend()) for _ in range(workers)]
            for other in backends:  # connected before the race starts
                assert await other.claim(["empty"], 1, "warm-up", 30) == []
            taken = await asyncio.gather(
                *(claim_all(other, f"w{i}") for i, other in enumerate(backends))
            )
        check_claimed_once(taken, plain, same_key)

    run(harness, body)


def test_claims_take_the_lowest_priority_then_the_earliest_run_at(harness: Harness) -> None:
    past = datetime.now(UTC) - timedelta(hours=3)

    async def body(b: Backend) -> None:
        a, late, early, urgent, tie = await b.enqueue(
            [
                new_job(priority=5, run_at=past),
                new_job(priority=0, run_at=past + timedelta(hours=1)),
                new_job(priority=0, run_at=past),
                new_job(priority=-1, run_at=past + timedelta(hours=2)),
                new_job(priority=0, run_at=past),  # same place as ``early``: the later id
            ]
        )
        expected = [urgent.id, early.id, tie.id, late.id, a.id]
        assert [(await claim_one(b)).id for _ in expected] == expected

        for job in await b.list_jobs(status=RUNNING):
            await b.release([job.claim])
        assert [j.id for j in await b.claim(["q"], 10, "w1", 30)] == expected

    run(harness, body)


def test_only_the_claimed_queues_are_claimed(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        mine, _, also = await b.enqueue(
            [new_job(queue="q"), new_job(queue="other"), new_job(queue="third")]
        )
        claimed = await b.claim(["q", "third"], 10, "w1", 30)
        assert {j.id for j in claimed} == {mine.id, also.id}

    run(harness, body)


def test_a_claim_across_queues_takes_turns_between_them(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        a1, a2, a3 = await b.enqueue([new_job(queue="qa", priority=-1) for _ in range(3)])
        b1, b2 = await b.enqueue([new_job(queue="qb", priority=5), new_job(queue="qb")])
        # qb's own order stays: b2 (priority 0) before b1 (priority 5).
        claimed = await b.claim(["qb", "qa"], 4, "w1", 30)
        assert [j.id for j in claimed] == [b2.id, a1.id, b1.id, a2.id]
        assert [j.id for j in await b.claim(["qa", "qb"], 10, "w1", 30)] == [a3.id]

    run(harness, body)


def test_jobs_with_a_fair_key_take_turns_with_other_keys(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        big = await b.enqueue([new_job(fair_key="big") for _ in range(6)])
        small = await b.enqueue([new_job(fair_key="small") for _ in range(2)])
        other = await b.enqueue([new_job(fair_key="other")])
        order = [j.id for j in await b.claim(["q"], 10, "w1", 30)]
        # A key's first job shares the turn being served; then the keys alternate.
        assert order[:6] == [j.id for j in (big[0], small[0], other[0], big[1], small[1], big[2])]
        assert [i for i in order if i in {e.id for e in big}] == [e.id for e in big]

    run(harness, body)


def test_a_keys_concurrency_limit_holds_across_claims(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        await b.set_key_limit("k", concurrency=2)
        keyed = await b.enqueue([new_job(limit_key="k") for _ in range(4)])
        (free,) = await b.enqueue([new_job()])
        other = await b.enqueue([new_job(limit_key="unlimited") for _ in range(2)])
        first = await b.claim(["q"], 10, "w1", 30)
        assert {j.id for j in first} == {keyed[0].id, keyed[1].id, free.id, *(e.id for e in other)}
        assert await b.claim(["q"], 10, "w2", 30) == []  # another worker: the limit holds
        (done,) = [j for j in first if j.id == keyed[0].id]
        assert await b.complete([done.claim]) == {done.id}
        assert [j.id for j in await b.claim(["q"], 10, "w2", 30)] == [keyed[2].id]
        await b.set_key_limit("k")  # no limit left: the rest is claimable
        assert [j.id for j in await b.claim(["q"], 10, "w2", 30)] == [keyed[3].id]

    run(harness, body)


def test_a_keys_rate_limit_counts_starts_not_running_jobs(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        await b.set_key_limit("k", rate=2, period=3600)
        keyed = await b.enqueue([new_job(limit_key="k") for _ in range(3)])
        first = await b.claim(["q"], 10, "w1", 30)
        assert [j.id for j in first] == [keyed[0].id, keyed[1].id]
        assert await b.complete([j.claim for j in first]) == {j.id for j in first}
        assert await b.claim(["q"], 10, "w1", 30) == []  # two starts this hour: none left

    run(harness, body)


def test_a_job_past_its_expiry_is_never_claimed(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        gone = datetime.now(UTC) - timedelta(seconds=1)
        expired, live = await b.enqueue(
            [new_job(expires_at=gone), new_job(expires_at=gone + timedelta(hours=1))]
        )
        assert [j.id for j in await b.claim(["q"], 10, "w1", 30)] == [live.id]
        # Not started: left pending, or cancelled already (expiry's upkeep is the backend's).
        assert (await the_job(b, expired.id)).status in (PENDING, CANCELLED)

    run(harness, body)


def test_one_job_per_entity_key_runs_at_a_time(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        first, second, free = await b.enqueue(
            [new_job(entity_key="e"), new_job(entity_key="e"), new_job()]
        )
        claimed = await b.claim(["q"], 10, "w1", 30)
        assert {j.id for j in claimed} == {first.id, free.id}
        assert await b.claim(["q"], 10, "w2", 30) == []  # ``e`` runs: its other job waits
        [job] = [j for j in claimed if j.id == first.id]
        assert await b.complete([job.claim]) == {first.id}
        assert [j.id for j in await b.claim(["q"], 10, "w2", 30)] == [second.id]

    run(harness, body)


# -- leases ----------------------------------------------------------------------------------


def test_an_expired_lease_is_reclaimed_with_its_attempt_spent(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job(max_attempts=3)])
        job = await claim_one(b)
        assert job.locked_until is not None
        end = job.locked_until
        assert await b.reclaim_expired(now=end) == {}  # the lease holds at its last instant
        assert await b.reclaim_expired(now=end + MICROSECOND) == {e.id: PENDING}
        back = await the_job(b, e.id)
        assert (back.status, back.attempts) == (PENDING, 1)
        assert await b.reclaim_expired(now=end + timedelta(hours=1)) == {}
        again = await claim_one(b)
        assert (again.id, again.attempts) == (e.id, 2)

    run(harness, body)


def test_a_lease_expired_on_the_last_attempt_fails_the_job(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job(max_attempts=1)])
        job = await claim_one(b)
        assert job.locked_until is not None
        assert await b.reclaim_expired(now=job.locked_until + MICROSECOND) == {e.id: FAILED}
        assert (await the_job(b, e.id)).status == FAILED
        assert await b.claim(["q"], 10, "w1", 30) == []

    run(harness, body)


def test_extending_a_lease_keeps_the_job_from_being_reclaimed(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job()])
        job = await claim_one(b, lease=30)
        assert job.locked_until is not None
        end = job.locked_until
        assert await b.extend([job.claim], 60, now=end) == {e.id: False}
        assert (await the_job(b, e.id)).locked_until == end + timedelta(seconds=60)
        assert await b.reclaim_expired(now=end + MICROSECOND) == {}
        ends = end + timedelta(seconds=60)
        assert await b.reclaim_expired(now=ends + MICROSECOND) == {e.id: PENDING}

    run(harness, body)


def test_a_stale_claim_can_neither_finish_nor_extend(harness: Harness) -> None:
    """The same worker's earlier claim of the same job too: a claim is one claim, not a
    worker's name."""

    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job()])
        stale = await claim_one(b, "w1")
        assert stale.locked_until is not None
        assert await b.reclaim_expired(now=stale.locked_until + MICROSECOND) == {e.id: PENDING}
        current = await claim_one(b, "w1")
        assert current.claim != stale.claim

        claim = stale.claim
        assert await b.extend([claim], 60) == {}
        assert await b.complete([claim]) == set()
        assert await b.complete([TaskResult(claim, "1")]) == set()
        assert await b.fail([FailedAttempt(claim, "boom", None)]) == {}
        assert await b.snooze([Snooze(claim, 0)]) == set()
        assert await b.cancel_claimed([claim]) == set()
        assert await b.release([claim]) == set()
        job = await the_job(b, e.id)
        assert (job.status, job.attempts, job.claim, job.result) == (
            RUNNING,
            2,
            current.claim,
            None,
        )

        assert await b.complete([current.claim]) == {e.id}
        assert (await the_job(b, e.id)).status == DONE
        assert await b.complete([current.claim]) == set()  # finished: owned no more

    run(harness, body)


# -- outcomes --------------------------------------------------------------------------------


def test_complete_keeps_deletes_or_archives_the_job(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        kept, with_result, deleted, archived = await b.enqueue([new_job() for _ in range(4)])
        jobs = {j.id: j for j in await b.claim(["q"], 4, "w1", 30)}
        assert await b.complete([jobs[kept.id].claim]) == {kept.id}
        done = await the_job(b, kept.id)
        assert done.status == DONE and done.finished_at is not None
        result = TaskResult(jobs[with_result.id].claim, '{"x": 1}')
        assert await b.complete([result]) == {with_result.id}
        assert (await the_job(b, with_result.id)).result == {"x": 1}
        assert await b.complete([jobs[deleted.id].claim], completion="delete") == {deleted.id}
        assert await b.get_job(deleted.id) is None
        claim = jobs[archived.id].claim
        assert await b.complete([claim], completion="archive") == {archived.id}
        assert (await the_job(b, archived.id)).status == DONE

    run(harness, body)


def test_a_failure_with_a_delay_is_scheduled_then_due(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job(max_attempts=3)])
        job = await claim_one(b)
        assert await b.fail([FailedAttempt(job.claim, "boom", 60)]) == {e.id: SCHEDULED}
        scheduled = await the_job(b, e.id)
        assert (scheduled.status, scheduled.attempts, scheduled.last_error) == (
            SCHEDULED,
            1,
            "boom",
        )
        assert job.locked_at is not None
        assert scheduled.run_at >= job.locked_at + timedelta(seconds=60)
        assert await b.claim(["q"], 10, "w1", 30) == []
        assert await b.promote_due(now=scheduled.run_at - MICROSECOND) == {}
        assert await b.claim(["q"], 10, "w1", 30) == []
        await b.promote_due(now=scheduled.run_at)
        again = await claim_one(b)
        assert (again.id, again.attempts) == (e.id, 2)

    run(harness, body)


def test_a_failure_without_a_delay_is_pending_at_once(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job(max_attempts=3)])
        job = await claim_one(b)
        assert await b.fail([FailedAttempt(job.claim, "boom", 0)]) == {e.id: PENDING}
        assert (await claim_one(b)).attempts == 2

    run(harness, body)


def test_the_last_attempt_or_a_final_failure_fails_the_job(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [spent] = await b.enqueue([new_job(max_attempts=2)])
        for attempt in (1, 2):
            job = await claim_one(b)
            assert (job.id, job.attempts) == (spent.id, attempt)
            status = PENDING if attempt == 1 else FAILED
            assert await b.fail([FailedAttempt(job.claim, "boom", 0)]) == {spent.id: status}
        failed = await the_job(b, spent.id)
        assert failed.status == FAILED and failed.finished_at is not None

        [final] = await b.enqueue([new_job(max_attempts=5)])
        job = await claim_one(b)
        assert job.id == final.id
        assert await b.fail([FailedAttempt(job.claim, "no", None)]) == {final.id: FAILED}
        assert await b.claim(["q"], 10, "w1", 30) == []

    run(harness, body)


def test_a_snooze_does_not_spend_an_attempt(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job(max_attempts=1)])
        for _ in range(3):  # snoozed more often than it has attempts
            job = await claim_one(b)
            assert await b.snooze([Snooze(job.claim, 0)]) == {e.id}
            snoozed = await the_job(b, e.id)
            assert snoozed.status == PENDING
            assert snoozed.max_attempts - snoozed.attempts == 1  # as before the claim
        job = await claim_one(b)
        assert await b.snooze([Snooze(job.claim, 60)]) == {e.id}
        later = await the_job(b, e.id)
        assert later.status == SCHEDULED
        await b.promote_due(now=later.run_at)
        job = await claim_one(b)
        assert await b.fail([FailedAttempt(job.claim, "boom", 0)]) == {e.id: FAILED}

    run(harness, body)


def test_a_released_job_is_pending_with_its_attempt_unspent(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job()])
        job = await claim_one(b)
        assert await b.release([job.claim]) == {e.id}
        back = await the_job(b, e.id)
        assert (back.status, back.attempts) == (PENDING, 0)
        assert await b.release([job.claim]) == set()
        assert (await claim_one(b)).attempts == 1

    run(harness, body)


# -- cancel ----------------------------------------------------------------------------------


def test_a_job_not_started_is_cancelled_and_never_claimed(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        pending, scheduled = await b.enqueue([new_job(), new_job(delay=3600)])
        assert await b.cancel(pending.id) == "cancelled"
        assert await b.cancel(scheduled.id) == "cancelled"
        for e in (pending, scheduled):
            assert (await the_job(b, e.id)).status == CANCELLED
        far = datetime.now(UTC) + timedelta(days=1)
        assert await b.promote_due(now=far) == {}
        assert await b.claim(["q"], 10, "w1", 30) == []
        assert await b.cancel(pending.id) == "unchanged"
        assert await b.cancel(2**62) == "unchanged"

    run(harness, body)


def test_a_running_job_is_asked_to_stop_through_its_heartbeat(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        [e] = await b.enqueue([new_job()])
        job = await claim_one(b)
        assert await b.extend([job.claim], 30) == {e.id: False}
        assert await b.cancel(e.id) == "requested"
        assert (await the_job(b, e.id)).status == RUNNING
        assert await b.extend([job.claim], 30) == {e.id: True}
        assert await b.cancel_claimed([job.claim]) == {e.id}
        cancelled = await the_job(b, e.id)
        assert cancelled.status == CANCELLED and cancelled.finished_at is not None
        assert await b.cancel(e.id) == "unchanged"

    run(harness, body)


# -- reads -----------------------------------------------------------------------------------


def test_jobs_are_listed_newest_first_by_filter_and_page(harness: Harness) -> None:
    async def body(b: Backend) -> None:
        a, b_, c = await b.enqueue([new_job(), new_job(task="other"), new_job(queue="z")])
        assert [j.id for j in await b.list_jobs()] == [c.id, b_.id, a.id]
        assert [j.id for j in await b.list_jobs(queue="q")] == [b_.id, a.id]
        assert [j.id for j in await b.list_jobs(task="other")] == [b_.id]
        assert [j.id for j in await b.list_jobs(limit=1, before=c.id)] == [b_.id]
        await claim_one(b)
        assert [j.id for j in await b.list_jobs(status=RUNNING)] == [a.id]
        assert await b.get_job(2**62) is None

    run(harness, body)
