"""A leasing worker sends its next claim while the last one is on its way (docs/design.md, "Two
claims in flight"), with a real Worker on a real server.

Each claim here is made slow by a pause before its statement (a server some milliseconds away):
while one is on its way the slots run out the reserve, and the worker sends the next one then,
not after the first returns.  Never more than two at once, the jobs reserved never beyond the
target the prefetch caps, every job run exactly once, and a queue with a concurrency limit
(whose claim must see what the slots can start now) still claims one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.polling import wait_for_async
from skiplock import App, Worker
from skiplock._runtime.leased_claims import LeasedClaims

pytestmark = pytest.mark.smoke

CLAIM_PAUSE = 0.05  # seconds each claim waits before its statement


class ClaimWatch:
    def __init__(self) -> None:
        self.now = 0  # claims on their way
        self.most = 0  # the most at once
        self.count = 0
        self.most_reserved = 0


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClaimWatch]:
    seen = ClaimWatch()
    claim_on = LeasedClaims._claim_on

    async def slow_claim_on(self: LeasedClaims, *args: Any) -> Any:
        seen.now += 1
        seen.count += 1
        seen.most = max(seen.most, seen.now)
        try:
            await asyncio.sleep(CLAIM_PAUSE)
            return await claim_on(self, *args)
        finally:
            seen.now -= 1

    monkeypatch.setattr(LeasedClaims, "_claim_on", slow_claim_on)
    yield seen


def drain(app: App, worker: Worker, jobs: int, seen: ClaimWatch) -> None:
    async def main() -> None:
        run = asyncio.create_task(worker.run())

        async def sample() -> None:
            while True:
                seen.most_reserved = max(seen.most_reserved, len(worker.state.reserved))
                await asyncio.sleep(0.0005)

        sampler = asyncio.create_task(sample())
        try:
            await wait_for_async(lambda: worker.stats.done >= jobs, 60.0, lambda: worker.stats)
        finally:
            sampler.cancel()
            worker.stop()
            await run

    asyncio.run(main())


def test_the_next_claim_goes_out_while_the_last_is_on_its_way(
    app: App, db: Any, watch: ClaimWatch
) -> None:
    @app.task(name="noop")
    async def noop(n: int) -> None:
        pass

    jobs, ahead, concurrency = 1500, 90, 10
    app.enqueue_many("noop", [{"n": n} for n in range(jobs)])
    worker = Worker(app, concurrency=concurrency, poll_interval=0.1)
    worker.capacity.ahead = lambda: ahead  # type: ignore[method-assign]
    drain(app, worker, jobs, watch)
    assert watch.most == 2  # overlapping, and never more than two
    assert watch.most_reserved <= concurrency + ahead  # what is on its way counts as reserved
    found = db.execute(
        f'SELECT status, attempts, count(*) FROM "{app.schema}".jobs GROUP BY 1, 2'
    ).fetchall()
    assert found == [("done", 1, jobs)]
    assert worker.stats.done == jobs and worker.stats.lost == 0


def test_a_queue_with_a_concurrency_limit_claims_one_claim_at_a_time(
    app: App, db: Any, watch: ClaimWatch
) -> None:
    @app.task(name="noop_limited", queue="limited")
    async def noop_limited(n: int) -> None:
        pass

    jobs = 300
    app.enqueue_many("noop_limited", [{"n": n} for n in range(jobs)])
    app.sync_client.set_concurrency_limit("limited", 10)
    worker = Worker(app, concurrency=10, poll_interval=0.1)
    worker.capacity.ahead = lambda: 90  # type: ignore[method-assign]
    drain(app, worker, jobs, watch)
    assert watch.count > 1 and watch.most == 1
    assert worker.stats.done == jobs and worker.stats.lost == 0
