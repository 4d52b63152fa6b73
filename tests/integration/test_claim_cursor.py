"""Claims that start after the worker's last claimed key (see skiplock/_runtime/claim_cursor.py).

A long transaction keeps the index entries of every job claimed since it began; a claim that
reads its queue from the start walks all of them.  Starting after the last claimed key skips
them, still takes any better priority at once, and leaves the jobs it skips (same priority,
older key) to the next claim from the start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for_async
from helpers.stores import SyncStore, sync_store
from skiplock import App, Worker
from skiplock.job import ClaimKey, Job


@pytest.fixture
def conn(app: App) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app.dsn, autocommit=True) as connection:
        yield connection


def claim(
    app: App,
    conn: psycopg.Connection[Any],
    queues: list[str],
    limit: int,
    after: dict[str, ClaimKey] | None = None,
) -> list[Job]:
    return sync_store(app).job_claim(conn, queues, limit, "w", 30, after=after)


def numbers(jobs: list[Job]) -> list[int]:
    return [j.payload["n"] for j in jobs]


def test_a_claim_after_a_key_takes_better_priorities_and_later_jobs_only(
    app: App, conn: psycopg.Connection[Any]
) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    now = datetime.now(UTC)
    for n, seconds in ((1, 30), (2, 20), (3, 10)):
        t.with_options(run_at=now - timedelta(seconds=seconds)).enqueue(n=n)
    t.with_options(priority=5).enqueue(n=4)
    (first,) = claim(app, conn, ["default"], 1)
    assert numbers([first]) == [1]
    # Due since, with an older key than the last claimed one (like a promoted retry):
    t.with_options(run_at=now - timedelta(seconds=60)).enqueue(n=5)
    t.with_options(priority=-1).enqueue(n=6)  # a better priority
    after = {"default": first.claim_key}
    assert numbers(claim(app, conn, ["default"], 10, after)) == [6, 2, 3, 4]
    # What the key skipped, a claim from the start takes.
    assert numbers(claim(app, conn, ["default"], 10)) == [5]


def test_the_limit_counts_better_and_later_jobs_together_in_claim_order(
    app: App, conn: psycopg.Connection[Any], db: Any
) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    for n in range(1, 4):
        t.enqueue(n=n)
    (first,) = claim(app, conn, ["default"], 1)
    for n in (10, 11):
        t.with_options(priority=-1).enqueue(n=n)
    got = claim(app, conn, ["default"], 3, {"default": first.claim_key})
    assert numbers(got) == [10, 11, 2]
    # The rows locked but not taken (n=3) were let go: they are still pending, unclaimed.
    (row,) = db.execute(
        f"""SELECT status, attempts FROM "{app.schema}".jobs WHERE payload->>'n' = '3'"""
    ).fetchall()
    assert row == ("pending", 0)


def test_each_queue_starts_after_its_own_key(app: App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="a", queue="qa")
    def a(n: int) -> None: ...

    @app.task(name="b", queue="qb")
    def b(n: int) -> None: ...

    now = datetime.now(UTC)
    for n in range(1, 4):
        a.with_options(run_at=now - timedelta(seconds=10 - n)).enqueue(n=n)
        b.with_options(run_at=now - timedelta(seconds=10 - n)).enqueue(n=10 + n)
    (first_a,) = claim(app, conn, ["qa"], 1)
    a.with_options(run_at=now - timedelta(seconds=60)).enqueue(n=0)  # behind qa's key
    got = claim(app, conn, ["qa", "qb"], 10, {"qa": first_a.claim_key})
    assert sorted(numbers(got)) == [2, 3, 11, 12, 13]
    assert numbers(claim(app, conn, ["qa", "qb"], 10)) == [0]


def claim_index_reads(app: App, after: ClaimKey | None) -> int:
    """Index entries a claim of 10 reads (then rolled back), live or not: the claim index's
    ``idx_tup_read`` before and after, as the server counts them."""
    params = {
        "queue": "default",
        "limit": 10,
        "worker": "w",
        "lease_seconds": 30.0,
        "commit_async": True,
        "held_marker": False,
        "schema": app.schema,
        "after_priority": after[0] if after else None,
        "after_run_at": after[1] if after else None,
        "after_id": after[2] if after else None,
    }
    index = f'"{app.schema}".jobs_claim_idx'

    def read_so_far() -> int:
        with psycopg.connect(app.dsn, autocommit=True) as reader:
            (count,) = reader.execute(
                "SELECT idx_tup_read FROM pg_stat_all_indexes WHERE indexrelid = %s::regclass",
                (index,),
            ).fetchone()
            return int(count)

    with psycopg.connect(app.dsn, autocommit=True) as conn:
        before = read_so_far()
        with conn.transaction(force_rollback=True):
            rows = conn.execute(app.queries["job_claim"], params).fetchall()
        assert len(rows) == 10
        conn.execute("SELECT pg_stat_force_next_flush()")  # reported as this statement ends
        conn.execute("SELECT 1")
    return read_so_far() - before


def test_under_a_long_transaction_a_claim_after_the_key_skips_the_claimed_entries(
    app: App, store: SyncStore, conn: psycopg.Connection[Any]
) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": n} for n in range(3000)])
    with psycopg.connect(app.dsn) as holder:  # a session that keeps its snapshot throughout
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute(f'SELECT count(*) FROM "{app.schema}".jobs').fetchone()
        key: ClaimKey | None = None
        for _ in range(25):
            jobs = claim(app, conn, ["default"], 100, {"default": key} if key else None)
            key = jobs[-1].claim_key
            done = store.job_finish_many(conn, [j.claim for j in jobs], "keep")
            assert len(done) == 100
        assert key is not None
        from_key, from_start = claim_index_reads(app, key), claim_index_reads(app, None)
        # From the start, the claim reads the entries of the 2,500 finished jobs, which the
        # snapshot keeps; from the key, its ten jobs'.
        assert from_start >= 2500, from_start
        assert from_key <= 20, from_key


def test_a_job_behind_the_workers_key_still_runs_while_the_backlog_lasts(app: App, db: Any) -> None:
    """Claims that come back full never read from the start; the rescan every second does."""
    started: list[tuple[int, float]] = []

    @app.task(name="slow")
    async def slow(n: int) -> None:
        started.append((n, time.monotonic()))
        await asyncio.sleep(0.05)

    slow.enqueue_many([{"n": n} for n in range(1, 121)])  # 3 s of work for two slots
    worker = Worker(app, concurrency=2, prefetch=0, poll_interval=30.0)

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: len(started) >= 10, 10.0)
            # Pending with an older key than anything claimed so far (like a released job),
            # and no NOTIFY: only a claim that reads from the start finds it.
            db.execute(
                f"""INSERT INTO "{app.schema}".jobs (queue, task, payload, run_at)
                    VALUES ('default', 'slow', '{{"n": 0}}', now() - interval '1 hour')"""
            )
            await wait_for_async(lambda: any(n == 0 for n, _ in started), 10.0)
        finally:
            worker.stop()
            await run

    asyncio.run(main())
    later = [n for n, _ in started if n != 0]
    assert len(later) < 100, f"the job behind the key waited for {len(later)} others"


def test_under_a_long_transaction_reads_from_the_start_are_rationed(
    app: App, db: Any, conn: psycopg.Connection[Any]
) -> None:
    """A worker that keeps up with its producer comes up short at most claims; each claim from
    the start walks every entry claimed since the held snapshot began.  Such claims may take a
    tenth of the time at most (see skiplock/_runtime/claim_cursor.py), not one claim in two or
    more."""
    ran: list[int] = []

    @app.task(name="t")
    async def t(n: int) -> None:
        ran.append(n)

    with psycopg.connect(app.dsn) as holder:  # keeps its snapshot throughout
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute(f'SELECT count(*) FROM "{app.schema}".jobs').fetchone()
        # 40,000 jobs claimed and finished since the snapshot: their claim-index entries stay.
        t.enqueue_many([{"n": -1}] * 40_000)
        conn.execute(f"""UPDATE "{app.schema}".jobs SET status = 'done', attempts = 1""")
        t.enqueue_many([{"n": -2}] * 10)
        assert claim_index_reads(app, None) >= 40_000  # a claim from the start walks them

        worker = Worker(app, concurrency=10, poll_interval=30.0)
        timings: list[tuple[bool, float]] = []  # (read from the start?, seconds)
        claim_jobs = worker.store.job_claim

        async def timed_claim(*args: Any, **kwargs: Any) -> list[Job]:
            began = time.monotonic()
            try:
                return await claim_jobs(*args, **kwargs)
            finally:
                timings.append((not kwargs.get("after"), time.monotonic() - began))

        worker.store.job_claim = timed_claim  # type: ignore[method-assign]

        async def main() -> float:
            began = time.monotonic()
            run = asyncio.create_task(worker.run())
            try:
                for n in range(150):  # 5 jobs every 10 ms: the worker keeps up
                    await t.enqueue_many_async([{"n": n}] * 5)
                    await asyncio.sleep(0.01)
                await wait_for_async(lambda: len(ran) == 760, 10.0, lambda: len(ran))
            finally:
                worker.stop()
                await run
            return time.monotonic() - began

        elapsed = asyncio.run(main())
    from_start = [s for first, s in timings if first]
    assert len(timings) > 50, timings
    # Measured: 29 of 151 claims, 9% of the time (every claim but one, 39%, before rationing).
    assert sum(from_start) < 0.2 * elapsed, (len(from_start), len(timings), elapsed)


def test_the_next_job_of_an_entity_key_starts_when_the_running_one_finishes(
    app: App, db: Any
) -> None:
    """The next job of a key sits behind the worker's key once later jobs were claimed; the
    worker reads from the start as soon as its job with that key finishes, not a rescan
    interval later."""
    started: dict[int, float] = {}

    @app.task(name="slow")
    async def slow(n: int) -> None:
        started[n] = time.monotonic()
        await asyncio.sleep(0.05)

    slow.with_options(entity_key="k").enqueue_many([{"n": 0}, {"n": 1}])
    slow.enqueue_many([{"n": n} for n in range(2, 102)])  # 2.5 s of work for two slots
    worker = Worker(app, concurrency=2, prefetch=0, poll_interval=30.0)

    async def main() -> None:
        run = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: 1 in started, 10.0, lambda: sorted(started))
        finally:
            worker.stop()
            await run

    asyncio.run(main())
    # Job 0 ran 50 ms; its successor started right after (a rescan interval is 1 s).
    assert started[1] - started[0] < 0.5, started[1] - started[0]
