"""Attacks on claims in pieces (docs/design.md, "Claims in pieces") that held: with the
worker claiming PIECE jobs at a time through a backlog, the bounds on what it claims
(max_in_flight, max_jobs, queue and key limits, the slots with prefetch=0), the order of a
queue's jobs on one slot (priorities, weighted queues, fair keys), a paused queue, a burst
and a stop in the middle of the pieces all hold as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers.polling import wait_for_async
from helpers.worker_runs import record_claims, run_until
from skiplock import App, Worker
from skiplock._runtime.capacity import PIECE


def _pieces(seen: list[tuple[int, int]]) -> int:
    """How many claims asked for a piece: the attack is on them."""
    return sum(1 for _, limit in seen if limit == PIECE)


def test_max_in_flight_holds_with_pieces(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    @app.task(name="noop")
    async def noop(n: int) -> None:
        ran.append(n)

    jobs = 8000
    app.enqueue_many("noop", [{"n": n} for n in range(jobs)])
    worker = Worker(app, concurrency=10, prefetch=2000, max_in_flight=450, poll_interval=0.5)
    seen = record_claims(monkeypatch)
    run_until(worker, lambda: len(ran) == jobs, 60.0)
    assert _pieces(seen), seen
    assert sorted(ran) == list(range(jobs))
    assert max(f + lim for f, lim in seen) <= 450, max(seen, key=lambda s: s[0] + s[1])


def test_max_jobs_with_pieces(app: App, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    @app.task(name="noop")
    async def noop(n: int) -> None:
        ran.append(n)

    app.enqueue_many("noop", [{"n": n} for n in range(6000)])
    worker = Worker(app, concurrency=10, prefetch=2000, max_jobs=3000, poll_interval=0.5)
    seen = record_claims(monkeypatch)

    async def main() -> None:
        await asyncio.wait_for(worker.run(), 60)

    asyncio.run(main())
    assert _pieces(seen), seen
    assert worker.stats.claimed <= 3000 and len(ran) == len(set(ran)) <= 3000
    (running,) = db.execute(
        f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE status = 'running'"
    ).fetchone()
    assert running == 0


def test_long_backlog_concurrency_1_keeps_leases(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    @app.task(name="noop")
    async def noop(n: int) -> None:
        ran.append(n)

    jobs = 30000
    app.enqueue_many("noop", [{"n": n} for n in range(jobs)])
    worker = Worker(app, concurrency=1, prefetch=5000, lease_seconds=1.5, poll_interval=0.5)
    seen = record_claims(monkeypatch)
    run_until(worker, lambda: len(ran) == jobs, 120)
    assert _pieces(seen), seen
    assert sorted(ran) == list(range(jobs))
    assert ran == list(range(jobs))  # one queue, one priority, one slot: claim order
    assert worker.stats.lost == 0


def test_priorities_one_slot_order(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[int, int]] = []

    @app.task(name="noop")
    async def noop(n: int, p: int) -> None:
        ran.append((p, n))

    jobs = 6000
    for p in (5, 1, 3, 0):
        app.enqueue_many("noop", [{"n": n, "p": p} for n in range(jobs // 4)], priority=p)
    worker = Worker(app, concurrency=1, prefetch=2000, poll_interval=0.5)
    seen = record_claims(monkeypatch)
    run_until(worker, lambda: len(ran) == jobs, 60.0)
    assert _pieces(seen), seen
    assert ran == sorted(ran)


def test_burst_finishes_with_pieces(app: App, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    @app.task(name="noop")
    async def noop(n: int) -> None:
        ran.append(n)

    app.enqueue_many("noop", [{"n": n} for n in range(8000)])
    worker = Worker(app, concurrency=10, prefetch=2000, burst=True, poll_interval=0.5)
    seen = record_claims(monkeypatch)
    asyncio.run(asyncio.wait_for(worker.run(), 60))
    assert _pieces(seen), seen
    assert sorted(ran) == list(range(8000)) and worker.claim_error is None


def test_limits_with_pieces(app: App, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from skiplock._runtime.leased_claims import LeasedClaims

    app.sync_client.set_concurrency_limit("lim", 2)
    app.sync_client.set_key_limit("k", concurrency=1)
    running = {"lim": 0, "k": 0}
    peak = {"lim": 0, "k": 0}
    ran: list[str] = []

    @app.task(name="w")
    async def w(n: int, kind: str) -> None:
        running[kind] = running.get(kind, 0) + 1
        peak[kind] = max(peak.get(kind, 0), running[kind])
        await asyncio.sleep(0.001 if kind != "free" else 0)
        running[kind] -= 1
        ran.append(kind)

    app.enqueue_many("w", [{"n": n, "kind": "free"} for n in range(8000)])
    app.enqueue_many("w", [{"n": n, "kind": "lim"} for n in range(200)], queue="lim")
    app.enqueue_many("w", [{"n": n, "kind": "k"} for n in range(200)], limit_key="k")
    over: list[tuple[int, int]] = []
    claim = LeasedClaims.claim

    async def checking(self: LeasedClaims, queues: list[str], limit: int, startable: Any) -> Any:
        can = startable()
        jobs = await claim(self, queues, limit, startable)
        limited = [j for j in jobs if j.payload.get("kind") in ("lim", "k")]
        if len(limited) > max(can, 0):
            over.append((len(limited), can))
        return jobs

    monkeypatch.setattr(LeasedClaims, "claim", checking)
    seen = record_claims(monkeypatch)
    worker = Worker(
        app, queues=["default", "lim"], concurrency=10, prefetch=2000, poll_interval=0.2
    )
    run_until(worker, lambda: len(ran) == 8400, 90)
    assert _pieces(seen), seen
    assert peak["lim"] <= 2 and peak["k"] <= 1 and not over


def test_weights_and_fair_keys_keep_order_within(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, str, int]] = []

    @app.task(name="w")
    async def w(n: int, q: str, f: str) -> None:
        ran.append((q, f, n))

    for q in ("a", "b"):
        for f in ("x", "y", "z"):
            app.enqueue_many(
                "w", [{"n": n, "q": q, "f": f} for n in range(1000)], queue=q, fair_key=f"{q}{f}"
            )
    seen = record_claims(monkeypatch)
    worker = Worker(app, queues={"a": 3, "b": 1}, concurrency=1, prefetch=2000, poll_interval=0.2)
    run_until(worker, lambda: len(ran) == 6000, 90)
    assert _pieces(seen), seen
    for q in ("a", "b"):
        for f in ("x", "y", "z"):
            mine = [n for (qq, ff, n) in ran if (qq, ff) == (q, f)]
            assert mine == list(range(1000)), (q, f, mine[:20])
    first = [q for q, _, _ in ran[:2000]]  # the weights: a takes three turns to b's one
    assert 1400 <= first.count("a") <= 1600, first.count("a")


def test_pause_mid_backlog(app: App, db: Any) -> None:
    ran: list[int] = []

    @app.task(name="noop", queue="pq")
    async def noop(n: int) -> None:
        ran.append(n)

    app.enqueue_many("noop", [{"n": n} for n in range(30000)])
    worker = Worker(app, queues=["pq"], concurrency=10, prefetch=2000, poll_interval=0.2)

    async def main() -> tuple[int, int]:
        run = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: len(ran) >= 8000, 30, lambda: worker.stats)
            await asyncio.to_thread(app.sync_client.set_paused, "pq", True)
            await asyncio.sleep(1.0)
            at = len(ran)
            await asyncio.sleep(1.0)
            return at, len(ran)
        finally:
            worker.stop()
            await run

    at, later = asyncio.run(main())
    assert at == later
    (running,) = db.execute(
        f"SELECT count(*) FROM \"{app.schema}\".jobs WHERE status = 'running'"
    ).fetchone()
    assert running == 0


def test_prefetch_0_big_concurrency(app: App, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    @app.task(name="noop")
    async def noop(n: int) -> None:
        ran.append(n)

    app.enqueue_many("noop", [{"n": n} for n in range(10000)])
    seen = record_claims(monkeypatch)
    worker = Worker(app, concurrency=300, prefetch=0, poll_interval=0.5)
    run_until(worker, lambda: len(ran) == 10000, 60.0)
    assert _pieces(seen), seen
    assert sorted(ran) == list(range(10000))
    assert max(f + lim for f, lim in seen) <= 300 + 600  # concurrency + the unwritten floor


def test_stop_mid_pieces(app: App, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    @app.task(name="noop")
    async def noop(n: int) -> None:
        ran.append(n)

    app.enqueue_many("noop", [{"n": n} for n in range(40000)])
    seen = record_claims(monkeypatch)
    worker = Worker(app, concurrency=10, prefetch=3000, poll_interval=0.5)

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        await wait_for_async(lambda: _pieces(seen) >= 20, 30)
        worker.stop()
        await asyncio.wait_for(run, 15)

    asyncio.run(main())
    assert _pieces(seen), seen
    counts = dict(
        db.execute(f'SELECT status, count(*) FROM "{app.schema}".jobs GROUP BY status').fetchall()
    )
    assert len(ran) == len(set(ran)) == counts.get("done", 0)
    assert counts.get("running", 0) == 0 and counts["done"] + counts["pending"] == 40000
