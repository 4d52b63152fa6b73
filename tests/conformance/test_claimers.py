"""A worker's claimer (skiplock.backends.claimer) keeps ``Backend.claim``'s contract, run
against every backend, through both claimers a backend can give: its own, on the backend as a
worker holds it (PostgreSQL: ``PostgresClaimer`` on a worker's pool, with its kept connection,
claim cursor and claim of limited keys), and the plain one, each claim a ``backend.claim``.
docs/backends.md, "Claimers".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta

import pytest

from helpers.backends import Harness, check_claimed_once, new_job
from skiplock.backends import Backend, PostgresBackend
from skiplock.backends.claimer import Claimer, ClaimerSettings, PlainClaimer, claimer_of
from skiplock.backends.postgres_claimer import PostgresClaimer
from skiplock.job import JobStatus

RUNNING, PENDING = JobStatus.RUNNING, JobStatus.PENDING

Opener = Callable[[str], AbstractAsyncContextManager[Claimer]]
Body = Callable[[Backend, Opener], Awaitable[None]]


@pytest.fixture(params=["own", "plain"])
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(harness: Harness, path: str, body: Body) -> None:
    """``body(backend, claimer_for)``: ``claimer_for(worker_id)`` opens a worker's claimer
    (on a backend of its own, as each worker process has) for the test's path."""

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:

            @asynccontextmanager
            async def claimer_for(worker: str) -> AsyncIterator[Claimer]:
                opened = harness.worker_backend() if path == "own" else harness.backend()
                backend = await stack.enter_async_context(opened)
                settings = ClaimerSettings(worker, lease_seconds=30)
                claimer = (
                    claimer_of(backend, settings)
                    if path == "own"
                    else PlainClaimer(backend, settings)
                )
                try:
                    yield claimer
                finally:
                    await claimer.close()

            backend = await stack.enter_async_context(harness.backend())
            await body(backend, claimer_for)

    asyncio.run(main())


def test_the_claimer_is_the_backends_own_on_a_workers_backend(harness: Harness, path: str) -> None:
    async def body(b: Backend, claimer_for: Opener) -> None:
        async with claimer_for("w1") as claimer:
            if path == "plain":
                assert isinstance(claimer, PlainClaimer)
            elif isinstance(b, PostgresBackend):
                assert isinstance(claimer, PostgresClaimer)

    run(harness, path, body)


def test_a_claim_runs_the_jobs_under_the_workers_lease(harness: Harness, path: str) -> None:
    async def body(b: Backend, claimer_for: Opener) -> None:
        enqueued = await b.enqueue([new_job() for _ in range(3)])
        async with claimer_for("w1") as claimer:
            jobs = await claimer.claim(["q"], 10, 10)
            assert [j.id for j in jobs] == [e.id for e in enqueued]
            for job in jobs:
                assert (job.status, job.attempts, job.locked_by) == (RUNNING, 1, "w1")
                assert job.locked_at is not None and job.locked_until is not None
                assert job.locked_until - job.locked_at == timedelta(seconds=30)
            assert await claimer.claim(["q"], 10, 10) == []  # running: not claimable again
            # The claims are the jobs' claims: they finish them, once.
            assert await b.complete([jobs[0].claim]) == {jobs[0].id}
            assert await b.complete([jobs[0].claim]) == set()
            assert await b.release([jobs[1].claim]) == {jobs[1].id}
            again = await claimer.claim(["q"], 10, 10)
            assert [(j.id, j.attempts) for j in again] == [(jobs[1].id, 1)]

    run(harness, path, body)


def test_concurrent_claimers_never_hand_a_job_to_two_workers(harness: Harness, path: str) -> None:
    """Also across workers: of jobs sharing an entity key, none is claimed while one runs."""
    count, keyed, workers = 300, 10, 4

    async def body(b: Backend, claimer_for: Opener) -> None:
        plain = await b.enqueue([new_job(payload={"i": i}) for i in range(count)])
        same_key = await b.enqueue([new_job(entity_key="e") for _ in range(keyed)])
        async with contextlib.AsyncExitStack() as stack:
            claimers = [
                await stack.enter_async_context(claimer_for(f"w{i}")) for i in range(workers)
            ]
            for claimer in claimers:  # connected before the race starts
                assert await claimer.claim(["empty"], 1, 1) == []

            async def claim_all(claimer: Claimer) -> list[int]:
                taken: list[int] = []
                while jobs := await claimer.claim(["q"], 7, 7):
                    taken += [j.id for j in jobs]
                return taken

            taken = await asyncio.gather(*(claim_all(c) for c in claimers))
        check_claimed_once(taken, plain, same_key)

    run(harness, path, body)


def test_claims_take_the_lowest_priority_then_the_earliest_run_at(
    harness: Harness, path: str
) -> None:
    past = datetime.now(UTC) - timedelta(hours=3)

    async def body(b: Backend, claimer_for: Opener) -> None:
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
        async with claimer_for("w1") as claimer:
            one_by_one = [j.id for _ in expected for j in await claimer.claim(["q"], 1, 1)]
            assert one_by_one == expected

    run(harness, path, body)


def test_only_the_claimed_queues_are_claimed_taking_turns(harness: Harness, path: str) -> None:
    async def body(b: Backend, claimer_for: Opener) -> None:
        a1, a2, a3 = await b.enqueue([new_job(queue="qa", priority=-1) for _ in range(3)])
        b1, b2 = await b.enqueue([new_job(queue="qb", priority=5), new_job(queue="qb")])
        (other,) = await b.enqueue([new_job(queue="other")])
        async with claimer_for("w1") as claimer:
            claimed = await claimer.claim(["qb", "qa"], 4, 4)
            assert [j.id for j in claimed] == [b2.id, a1.id, b1.id, a2.id]
            assert [j.id for j in await claimer.claim(["qa", "qb"], 10, 10)] == [a3.id]
        assert (await b.get_job(other.id)).status == PENDING  # type: ignore[union-attr]

    run(harness, path, body)


def test_a_keys_concurrency_limit_holds_across_claimers(harness: Harness, path: str) -> None:
    async def body(b: Backend, claimer_for: Opener) -> None:
        await b.set_key_limit("k", concurrency=2)
        keyed = await b.enqueue([new_job(limit_key="k") for _ in range(4)])
        (free,) = await b.enqueue([new_job()])
        async with claimer_for("w1") as one, claimer_for("w2") as two:
            first = await one.claim(["q"], 10, 10)
            assert {j.id for j in first} == {keyed[0].id, keyed[1].id, free.id}
            assert await two.claim(["q"], 10, 10) == []  # another worker: the limit holds
            (done,) = [j for j in first if j.id == keyed[0].id]
            assert await b.complete([done.claim]) == {done.id}
            assert [j.id for j in await two.claim(["q"], 10, 10)] == [keyed[2].id]

    run(harness, path, body)
