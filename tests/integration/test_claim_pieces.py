"""Claims in pieces with a real Worker on a real server (docs/design.md, "Claims in pieces"):
while a backlog drains, the worker claims PIECE jobs at a time once it has timed its round trip
and a few claims, and every job still runs once."""

from __future__ import annotations

from typing import Any

import pytest

from helpers.worker_runs import record_claims, run_until
from skiplock import App, Worker
from skiplock._runtime.capacity import PIECE

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
    seen = record_claims(monkeypatch)
    run_until(worker, lambda: len(ran) == jobs, 30.0)
    asked = [limit for _, limit in seen]
    assert sorted(ran) == list(range(jobs))
    assert worker.capacity.piece() == PIECE  # the local server: its round trip is short
    # After the first claims (timing them), the backlog went in pieces, none larger.
    later = asked[8:-2]
    assert later and max(later) == PIECE, asked
    (done,) = db.execute(
        f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE status = 'done'"
    ).fetchone()
    assert done == jobs
