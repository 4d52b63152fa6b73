"""Claims in pieces with a real Worker on a real server (docs/design.md, "Claims in pieces"):
while a backlog drains, the worker claims PIECE jobs at a time once it has timed its round trip
and a few claims, and every job still runs once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers.polling import wait_for_async
from skiplock import App, Worker
from skiplock._runtime.capacity import PIECE
from skiplock._runtime.leased_slots import LeasedSlots

pytestmark = pytest.mark.smoke


def test_a_backlog_is_claimed_in_pieces_once_the_round_trip_is_timed(
    app: App, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[int] = []

    @app.task(name="noop")
    async def noop(n: int) -> None:
        ran.append(n)

    jobs = 6000
    app.enqueue_many("noop", [{"n": n} for n in range(jobs)])
    worker = Worker(app, concurrency=10, prefetch=500, poll_interval=0.5)
    asked: list[int] = []
    claim = LeasedSlots.claim

    async def recording(slots: LeasedSlots, queues: list[str], limit: int) -> int:
        asked.append(limit)
        return await claim(slots, queues, limit)

    monkeypatch.setattr(LeasedSlots, "claim", recording)

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: len(ran) == jobs, 30.0, lambda: worker.stats)
        finally:
            worker.stop()
            await run

    asyncio.run(main())
    assert sorted(ran) == list(range(jobs))
    assert worker.capacity.piece() == PIECE  # the local server: its round trip is short
    # After the first claims (timing them), the backlog went in pieces, none larger.
    later = asked[8:-2]
    assert later and max(later) == PIECE, asked
    (done,) = db.execute(
        f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE status = 'done'"
    ).fetchone()
    assert done == jobs
