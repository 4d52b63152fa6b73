"""A leasing worker never starts a job it claimed ahead (reserved) once that job's lease may be
gone: a heartbeat found it reclaimed, or no heartbeat has renewed it for two thirds of the
lease (the database out of reach, the process frozen).  Started, it would run while another
worker runs it too.  A real Worker on a real server; its heartbeats are made to fail for a while
in the second test.  (Running jobs whose lease is lost: test_lost_leases.py.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for_async
from helpers.stores import SyncStore
from helpers.worker_faults import failing_heartbeats
from skiplock import App, Worker


def primed_worker(app: App) -> Worker:
    """Concurrency 1, lease 1 s, claiming ahead from its first claim (a throughput as if it had
    just run 1,000 jobs, remembered for a minute: however slow its start, it claims ahead): the
    first claim takes the slow job and the victim behind it."""
    worker = Worker(app, concurrency=1, prefetch=5, lease_seconds=1.0, poll_interval=0.1,
                    listen=False)  # fmt: skip
    worker.capacity.throughput.window = 60.0
    worker.capacity.throughput.add(1000)
    return worker


Runs = dict[str, list[int]]  # attempts of each run, by task


def register(
    app: App, release: asyncio.Event | None = None, seconds: float = 0.0
) -> tuple[Any, Any, Runs]:
    """A slow job (until ``release`` is set, else for ``seconds``) and a victim to claim ahead."""
    runs: Runs = {"slow": [], "victim": []}
    started = asyncio.Event()

    @app.task(name="slow", pass_context=True)
    async def slow(ctx: Any) -> None:
        runs["slow"].append(ctx.job.attempts)
        started.set()
        if release is not None:
            await release.wait()
        else:
            await asyncio.sleep(seconds)

    @app.task(name="victim", pass_context=True)
    async def victim(ctx: Any) -> None:
        runs["victim"].append(ctx.job.attempts)

    slow.started = started  # type: ignore[attr-defined]
    return slow, victim, runs


def test_a_reserved_job_a_heartbeat_found_reclaimed_is_not_started(
    app: App, store: SyncStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> tuple[Runs, int]:
        release = asyncio.Event()
        slow, victim, runs = register(app, release)
        slow.enqueue()
        victim_id = victim.enqueue().id
        worker = primed_worker(app)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(slow.started.wait(), 15)
        assert [r.job.id for r in worker.state.reserved] == [victim_id]  # claimed ahead, waiting

        def steal() -> None:  # expire, reclaim and claim it elsewhere in one transaction
            with psycopg.connect(app.dsn) as conn:
                conn.execute(f'UPDATE "{app.schema}".jobs SET locked_until = now() - '
                             "interval '1 s' WHERE id = %s", (victim_id,))  # fmt: skip
                store.job_reclaim_expired(conn)
                taken = store.job_claim(conn, ["default"], 1, "thief", 30)
                assert [j.id for j in taken] == [victim_id]

        await asyncio.to_thread(steal)
        await asyncio.sleep(0.8)  # a heartbeat or two (every lease / 3) report it lost
        release.set()
        await wait_for_async(lambda: worker.stats.lost >= 1, 15)  # given back, reported lost
        await asyncio.sleep(0.3)
        worker.stop()
        await asyncio.wait_for(running, 15)
        return runs, victim_id

    with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
        runs, victim_id = asyncio.run(main())
    assert runs["victim"] == []  # the thief has it; this worker never ran it
    assert "its lease was found reclaimed" in caplog.text
    job = app.get_job(victim_id)
    assert job is not None and (job.status, job.locked_by) == ("running", "thief")


def test_a_reserved_job_no_heartbeat_renewed_is_given_back_not_started(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> tuple[Runs, int, int]:
        # The slow job runs 0.75 s: when it ends, the victim's lease (claimed with it) has less
        # than a third of its 1 s left, and has not run out (past it, the worker would reclaim
        # and claim it again, and find it reclaimed that way).
        slow, victim, runs = register(app, seconds=0.75)
        slow.enqueue()
        victim_id = victim.enqueue().id
        worker = primed_worker(app)
        reachable = failing_heartbeats(worker)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(slow.started.wait(), 15)
        assert [r.job.id for r in worker.state.reserved] == [victim_id]
        await asyncio.sleep(0.9)  # the slow job has ended; heartbeats work again
        reachable.set()
        await wait_for_async(lambda: bool(runs["victim"]), 15)
        await asyncio.sleep(0.5)
        worker.stop()
        await asyncio.wait_for(running, 15)
        return runs, victim_id, worker.stats.released

    with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
        runs, victim_id, released = asyncio.run(main())
    # Its first claim was given back, never started (released: the attempt is not spent); it
    # ran once, from a later claim.
    assert runs["victim"] == [1] and released == 1, (runs, released)
    assert "no heartbeat has renewed its lease lately" in caplog.text
    job = app.get_job(victim_id)
    assert job is not None and job.status == "done"
