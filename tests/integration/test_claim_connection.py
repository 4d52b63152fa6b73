"""The leasing worker's claims, through PostgreSQL's claimer (the default backend's), keep one
pooled connection.

It claims on the same connection while that works; a claim that fails on it gives it back to
the pool, and when the connection was lost (here: its server session terminated), the claim runs
again at once on a fresh one, not a poll interval later; at shutdown it goes back to the pool,
which closes it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers.polling import wait_for_async
from skiplock import App, Worker
from skiplock._runtime.leased_slots import LeasedSlots
from skiplock.backends.postgres_claimer import PostgresClaimer

pytestmark = pytest.mark.smoke


def test_claims_share_a_connection_and_a_broken_one_is_replaced(app: App, db: Any) -> None:
    ran: list[int] = []

    @app.task(name="note")
    async def note(n: int) -> None:
        ran.append(n)

    worker = Worker(app, concurrency=2, poll_interval=30.0)  # only NOTIFYs wake it

    def claim_conn() -> Any:
        assert isinstance(worker.slots, LeasedSlots)
        claimer = worker.slots.claims.claimer
        assert isinstance(claimer, PostgresClaimer)
        return claimer.conn

    def claim_pid() -> int | None:
        conn = claim_conn()
        return None if conn is None or conn.closed else conn.info.backend_pid

    async def main() -> tuple[list[int | None], Any]:
        run = asyncio.create_task(worker.run())
        pids = []
        try:
            for n in (1, 2):
                note.enqueue(n=n)
                await wait_for_async(lambda n=n: n in ran, 5.0, lambda: ran)
                pids.append(claim_pid())
            db.execute("SELECT pg_terminate_backend(%s)", [pids[0]])
            note.enqueue(n=3)  # its NOTIFY wakes a claim on the dead session, then a new one
            await wait_for_async(lambda: 3 in ran, 5.0, lambda: (ran, worker.stats))
            pids.append(claim_pid())
            last = claim_conn()
        finally:
            worker.stop()
            await run
        return pids, last

    pids, last = asyncio.run(main())
    assert pids[0] is not None and pids[0] == pids[1]  # kept from one claim to the next
    assert pids[2] is not None and pids[2] != pids[0]  # replaced after the failed claim
    assert sorted(ran) == [1, 2, 3]
    assert claim_conn() is None and last is not None and last.closed  # given back, closed
