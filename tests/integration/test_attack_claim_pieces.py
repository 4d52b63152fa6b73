"""Attacks on claims in pieces (docs/design.md, "Claims in pieces"): the round trip a leasing
worker times on its pool before a claim every few seconds is only a measurement; whatever
happens to it, the claim goes on as it did before."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest

from helpers.polling import wait_for_async
from skiplock import App, Worker
from skiplock._runtime.leased_slots import LeasedSlots
from skiplock.backends.postgres_claimer import PostgresClaimer

pytestmark = pytest.mark.smoke


def test_a_dead_idle_pool_connection_does_not_fail_the_claim(
    app: App, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The pool's idle connections die (a DBA's script ending idle sessions, an idle timeout)
    while the claim's own connection lives: the claim that times the round trip next still
    claims, at once, not a poll interval later after a "claim failed" warning."""
    ran: list[int] = []

    @app.task(name="note")
    async def note(n: int) -> None:
        ran.append(n)

    worker = Worker(app, concurrency=2, poll_interval=30.0)  # only NOTIFYs wake it

    def slots() -> LeasedSlots:
        assert isinstance(worker.slots, LeasedSlots)
        return worker.slots

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        try:
            note.enqueue(n=1)
            await wait_for_async(lambda: 1 in ran, 5.0, lambda: ran)
            await asyncio.sleep(0.5)  # its outcome written, the worker idle
            claimer = slots().claims.claimer
            assert isinstance(claimer, PostgresClaimer) and claimer.conn is not None
            pool = slots().claims.pool
            idle = [c.info.backend_pid for c in pool._pool]  # the pool's idle connections
            assert idle and claimer.conn.info.backend_pid not in idle
            db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [idle])
            slots()._next_round_trip = -math.inf  # the next claim times the round trip
            note.enqueue(n=2)  # its NOTIFY wakes the claim
            await wait_for_async(lambda: 2 in ran, 5.0, lambda: (ran, worker.stats))
        finally:
            worker.stop()
            await run

    with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
        asyncio.run(main())
    assert sorted(ran) == [1, 2]
    assert not [r for r in caplog.records if "claim failed" in r.getMessage()], caplog.text


def test_a_pool_with_no_connection_free_does_not_hold_the_claim_back(app: App) -> None:
    """Every connection of the pool but the claim's own is taken (long writes, say): the claim
    that times the round trip next does not wait for one (the pool's timeout, 30 s), it claims
    on its own connection as it did before the round trip was timed."""
    ran: list[int] = []

    @app.task(name="note")
    async def note(n: int) -> None:
        ran.append(n)

    worker = Worker(app, concurrency=2, poll_interval=30.0)  # only NOTIFYs wake it

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        taken: list[Any] = []
        try:
            note.enqueue(n=1)
            await wait_for_async(lambda: 1 in ran, 5.0, lambda: ran)
            await asyncio.sleep(0.5)  # its outcome written, the worker idle
            assert isinstance(worker.slots, LeasedSlots)
            pool = worker.slots.claims.pool
            while len(taken) + 1 < pool.max_size:  # all but the claim's connection
                taken.append(await pool.getconn())
            worker.slots._next_round_trip = -math.inf  # the next claim times the round trip
            note.enqueue(n=2)  # its NOTIFY wakes the claim
            await wait_for_async(lambda: 2 in ran, 5.0, lambda: (ran, worker.stats))
        finally:
            for conn in taken:
                await pool.putconn(conn)
            worker.stop()
            await run

    asyncio.run(main())
    assert sorted(ran) == [1, 2]
