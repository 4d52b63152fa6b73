"""Periodic jobs and maintenance leadership with real Workers on a real server.

Several in-process Workers share one event loop (each with its own pool, listener and
elector), so ``worker.elector.is_leader`` can be sampled between their steps.  The abrupt
leader death is a real worker process killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers.polling import comes_true_async, wait_for, wait_for_async
from helpers.stores import SyncStore
from skiplock import App, JobContext, Worker

FAST = {"poll_interval": 0.1, "leader_ttl": 1.0}


def start(workers: list[Worker]) -> list[asyncio.Task[Any]]:
    return [asyncio.create_task(w.run()) for w in workers]


async def stop(workers: list[Worker], tasks: list[asyncio.Task[Any]]) -> None:
    for w in workers:
        w.stop()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def leaders(workers: list[Worker]) -> list[Worker]:
    return [w for w in workers if w.elector is not None and w.elector.is_leader]


def ticks_of(db: Any, app: App, name: str) -> list[tuple[datetime, int]]:
    return db.execute(
        f'SELECT tick, job_id FROM "{app.schema}".periodic_ticks WHERE name = %s ORDER BY tick',
        (name,),
    ).fetchall()


def jobs_of(db: Any, app: App, task: str) -> dict[int, tuple[str, datetime]]:
    rows = db.execute(
        f'SELECT id, status, created_at FROM "{app.schema}".jobs WHERE task = %s', (task,)
    ).fetchall()
    return {job_id: (status, created) for job_id, status, created in rows}


# -- periodic --------------------------------------------------------------------------------


def test_three_workers_enqueue_exactly_one_job_per_tick(app: App, pg_dsn: str, db: Any) -> None:
    runs: list[int] = []

    @app.periodic(every=1.0, name="beat", pass_context=True)
    async def beat(ctx: JobContext) -> None:
        runs.append(ctx.job.id)

    workers = [Worker(app, concurrency=2, **FAST) for _ in range(3)]

    async def main() -> None:
        tasks = start(workers)
        try:
            await asyncio.sleep(4.6)
        finally:
            await stop(workers, tasks)

    asyncio.run(main())

    # Run what the last tick may have left pending, with an app that has no schedule.
    drain_app = App(pg_dsn, app.schema)

    @drain_app.task(name="beat", pass_context=True)
    async def beat_drain(ctx: JobContext) -> None:
        runs.append(ctx.job.id)

    try:
        asyncio.run(Worker(drain_app, burst=True, poll_interval=0.05).run())
    finally:
        drain_app.close()

    ticks = ticks_of(db, app, "beat")
    jobs = jobs_of(db, app, "beat")
    assert 4 <= len(ticks) <= 6, f"{len(ticks)} ticks in ~4.6 s of a 1 s schedule: {ticks}"
    tick_times = [t for t, _ in ticks]
    gaps = {later - earlier for earlier, later in itertools.pairwise(tick_times)}
    assert gaps == {timedelta(seconds=1)}, f"ticks not one second apart: {tick_times}"
    assert all(t.microsecond == 0 for t in tick_times)
    # One job per tick, and every job belongs to a tick.
    assert sorted(job_id for _, job_id in ticks) == sorted(jobs)
    for tick, job_id in ticks:
        created = jobs[job_id][1]
        assert timedelta(0) <= created - tick < timedelta(seconds=2.5), (tick, created)
    # The handler ran once per job.
    assert Counter(runs) == Counter(jobs.keys())
    assert {status for status, _ in jobs.values()} == {"done"}
    assert sum(w.maintenance.stats.periodic_enqueued for w in workers if w.maintenance) == len(
        ticks
    )


def test_concurrent_enqueues_of_one_tick_make_one_job(app: App, store: SyncStore, db: Any) -> None:
    """The tick's primary key decides, even when several maintainers race on the same tick."""

    @app.periodic(every=60.0, name="race")
    def race() -> None: ...

    job = app.build_jobs("race", [{}], app.tasks["race"].settings.options)
    tick = datetime.fromisoformat("2024-01-01T12:00:00+00:00")
    barrier = threading.Barrier(4)
    results: list[int | None] = []
    errors: list[BaseException] = []

    def enqueue() -> None:
        try:
            with psycopg.connect(app.dsn, autocommit=True) as conn:
                barrier.wait(5)
                results.append(store.periodic_enqueue_tick(conn, "race", tick, job))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=enqueue) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors, errors
    made = [r for r in results if r is not None]
    assert len(results) == 4 and len(made) == 1, results
    assert list(jobs_of(db, app, "race")) == made
    assert ticks_of(db, app, "race") == [(tick, made[0])]


def test_only_workers_serving_a_periodic_tasks_queue_enqueue_its_ticks(app: App, db: Any) -> None:
    """The leader serves only ``mail``: it enqueues no ``cron`` tick, which nobody would run.
    A worker that serves ``cron`` enqueues them although it does not lead."""

    @app.periodic(every=0.5, name="sweep", queue="cron")
    def sweep() -> None: ...

    @app.task(name="send", queue="mail")
    def send() -> None: ...

    mail = Worker(app, queues=["mail"], **FAST)
    cron = Worker(app, queues=["cron"], **FAST)

    async def main() -> None:
        tasks = start([mail])
        try:
            await wait_for_async(lambda: leaders([mail]) == [mail], 5.0, "mail never leads")
            await asyncio.sleep(1.6)  # three ticks or more, while only the mail worker runs
            assert ticks_of(db, app, "sweep") == [], "the mail worker enqueued cron ticks"
            tasks += start([cron])
            await wait_for_async(lambda: len(jobs_of(db, app, "sweep")) >= 2, 10.0)
            assert leaders([mail, cron]) == [mail]
        finally:
            await stop([mail, cron], tasks)

    asyncio.run(main())
    assert mail.maintenance is not None and mail.maintenance.stats.periodic_enqueued == 0


def test_three_burst_workers_racing_on_maintenance_enqueue_the_tick_once(app: App, db: Any) -> None:
    """Burst workers run maintenance themselves (no leader): the database still dedups."""
    runs: list[int] = []

    @app.periodic(every=3600.0, misfire_grace=3600.0, name="hourly", pass_context=True)
    def hourly(ctx: JobContext) -> None:
        runs.append(ctx.job.id)

    workers = [Worker(app, burst=True, poll_interval=0.05) for _ in range(3)]

    async def main() -> list[Any]:
        # Let every worker end by itself: cancelling siblings of a failed one is not the point.
        runs = asyncio.gather(*(w.run() for w in workers), return_exceptions=True)
        return await asyncio.wait_for(runs, 30)

    failures = [r for r in asyncio.run(main()) if isinstance(r, BaseException)]
    assert not failures, f"burst workers failed: {failures!r}"
    ticks = ticks_of(db, app, "hourly")
    assert len(ticks) == 1
    assert list(jobs_of(db, app, "hourly")) == [ticks[0][1]]
    assert runs == [ticks[0][1]]
    assert sum(w.maintenance.stats.periodic_enqueued for w in workers if w.maintenance) == 1


def test_no_catch_up_burst_after_downtime_unless_catch_up_asks(app: App, db: Any) -> None:
    @app.periodic(every=1.0, name="p0")
    def p0() -> None: ...

    @app.periodic(every=1.0, name="p2", catch_up=2)
    def p2() -> None: ...

    async def phase(until: Callable[[], bool], timeout: float) -> None:
        worker = Worker(app, **FAST)
        task = asyncio.create_task(worker.run())
        try:
            await comes_true_async(until, timeout)
        finally:
            await stop([worker], [task])

    # Phase 1: a worker runs for a moment and enqueues the current ticks.
    asyncio.run(phase(lambda: len(ticks_of(db, app, "p0")) >= 2, 3.0))
    stopped = time.time()
    before = {name: {t for t, _ in ticks_of(db, app, name)} for name in ("p0", "p2")}
    assert before["p0"], "phase 1 enqueued nothing"
    last_before = max(before["p0"])

    # Downtime of at least 3 s; restart just after a whole second so no new tick comes while
    # we look (a tick in the window would blur which ticks the restart itself enqueued).
    restart = max(stopped + 3.0, time.time())
    restart = float(int(restart) + 1) + 0.05
    time.sleep(max(0.0, restart - time.time()))
    restarted = datetime.now(UTC).replace(microsecond=0)  # the latest tick at restart

    def new_ticks(name: str) -> list[datetime]:
        return sorted(t for t, _ in ticks_of(db, app, name) if t not in before[name])

    asyncio.run(
        phase(lambda: len(new_ticks("p0")) >= 1 and len(new_ticks("p2")) >= 3, 0.6),
    )
    one = timedelta(seconds=1)
    p0_new = new_ticks("p0")
    assert len(p0_new) == 1, f"catch_up=0 must enqueue only the latest tick, not {p0_new}"
    latest = p0_new[0]
    # (latest is the restart's own tick unless a slow start let the next second come first)
    assert restarted <= latest <= restarted + one
    assert latest - last_before >= 3 * one, "the downtime was shorter than 3 s"
    assert new_ticks("p2") == [latest - 2 * one, latest - one, latest], (
        "catch_up=2 must enqueue the latest tick and the two before it"
    )


def test_a_caught_up_tick_is_not_enqueued_again_after_the_ticks_are_pruned(
    app: App, store: SyncStore, db: Any
) -> None:
    """A daily task with ``catch_up=2`` whose latest tick is past its grace asks for yesterday's
    tick too, which is always more than a day old: once the leader's prune has forgotten ticks
    older than a day, a worker started afterwards (a deploy, a recycled process) must not
    enqueue yesterday's tick again."""

    @app.periodic(cron="0 3 * * *", catch_up=2, name="daily")
    def daily() -> None: ...

    def burst() -> None:
        worker = Worker(app, burst=True, poll_interval=0.05)
        asyncio.run(asyncio.wait_for(worker.run(), 30))

    burst()
    first = jobs_of(db, app, "daily")
    assert len(first) >= 2, first  # yesterday's tick and today's (and the day before's)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        store.periodic_prune_ticks(conn)  # as the leader does every minute
    burst()
    assert jobs_of(db, app, "daily").keys() == first.keys(), "a tick was enqueued twice"
    assert len(ticks_of(db, app, "daily")) >= 1  # the latest tick stays, against a second run


# -- leadership ------------------------------------------------------------------------------


def test_one_leader_at_a_time_and_failover_after_a_clean_stop(app: App, db: Any) -> None:
    ran: list[int] = []

    @app.task(name="later", pass_context=True)
    async def later(ctx: JobContext) -> None:
        ran.append(ctx.job.id)

    workers = [Worker(app, **FAST) for _ in range(3)]
    samples: list[int] = []

    async def sample(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            samples.append(len(leaders(workers)))
            await asyncio.sleep(0.01)

    async def main() -> None:
        tasks = start(workers)
        try:
            await wait_for_async(lambda: len(leaders(workers)) == 1, 5.0, "nobody leads")
            first = leaders(workers)[0]
            await sample(1.5)
            assert set(samples) == {1}, f"leader count over time: {Counter(samples)}"
            assert leaders(workers) == [first], "leadership moved without a reason"

            # Clean stop: the leader resigns, another takes over well before the ttl runs out.
            index = workers.index(first)
            first.stop()
            await asyncio.wait_for(tasks[index], 10)
            stopped = time.monotonic()
            holders = db.execute(f'SELECT holder FROM "{app.schema}".leaders').fetchall()
            assert (first.worker_id,) not in holders, "the stopped leader did not resign"
            others = [w for w in workers if w is not first]
            samples.clear()
            await wait_for_async(lambda: len(leaders(others)) == 1, 1.0 + 0.5)
            took = time.monotonic() - stopped
            assert took < first.leader_ttl, f"takeover after {took:.2f}s: resign had no effect"
            await sample(0.5)
            assert set(samples) == {1}

            # Maintenance moved with it: a scheduled job gets promoted (only leaders promote).
            new = leaders(others)[0]
            job = later.with_options(delay=0.3).enqueue()
            await wait_for_async(lambda: job.id in ran, 5.0, "scheduled job never ran")
            assert new.maintenance is not None and new.maintenance.stats.promoted >= 1
            remaining = [t for i, t in enumerate(tasks) if i != index]
            await stop(others, remaining)
        finally:
            for w in workers:
                w.stop()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert ran == [job_id for (job_id,) in db.execute(f'SELECT id FROM "{app.schema}".jobs')]


VICTIM = """
import asyncio, os, sys
from skiplock import App, Worker

app = App(os.environ["DSN"], os.environ["SCHEMA"])


@app.task(name="slow", queue="lq")
async def slow(seconds: float) -> None:
    await asyncio.sleep(seconds)


asyncio.run(Worker(app, worker_id=sys.argv[1], poll_interval=0.1, leader_ttl=1.0,
                   lease_seconds=1.0).run())
"""


@pytest.mark.slow
def test_killed_leader_is_replaced_and_its_expired_lease_is_reclaimed(
    app: App, pg_dsn: str, db: Any, tmp_path: Path
) -> None:
    """SIGKILL: no resignation, no flush.  Another worker leads once the role expires, and
    its maintenance reclaims the dead worker's job, which then runs again."""
    ran: list[tuple[int, int]] = []

    @app.task(name="slow", queue="lq", pass_context=True)
    async def slow(ctx: JobContext, seconds: float) -> None:
        ran.append((ctx.job.id, ctx.job.attempts))

    job_id = slow.enqueue(seconds=60).id
    (tmp_path / "victim.py").write_text(textwrap.dedent(VICTIM))
    env = {**os.environ, "DSN": pg_dsn, "SCHEMA": app.schema}
    victim = subprocess.Popen(
        [sys.executable, "victim.py", "victim"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def holder_and_locker() -> tuple[str | None, str | None]:
            row = db.execute(f'SELECT holder FROM "{app.schema}".leaders').fetchone()
            locked_by = db.execute(
                f'SELECT locked_by FROM "{app.schema}".jobs WHERE id = %s', (job_id,)
            ).fetchone()[0]
            return (row[0] if row else None, locked_by)

        wait_for(
            lambda: holder_and_locker() == ("victim", "victim"),
            15,
            lambda: f"the victim to lead and claim (holder, locked_by: {holder_and_locker()})",
        )

        survivors = [Worker(app, lease_seconds=1.0, **FAST) for _ in range(2)]

        async def main() -> tuple[float, Worker]:
            tasks = start(survivors)
            try:
                # While the victim renews its role, nobody else may take it.
                await asyncio.sleep(0.6)
                assert leaders(survivors) == [], "leadership taken from a live leader"
                victim.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                await wait_for_async(lambda: len(leaders(survivors)) == 1, 1.0 + 0.34 + 1.5)
                took = time.monotonic() - killed
                new = leaders(survivors)[0]
                # Maintenance continues on the new leader: the dead worker's lease is reclaimed
                # and the job runs again (attempt 2).
                await wait_for_async(lambda: (job_id, 2) in ran, 6.0, "job never rerun")
                assert len(leaders(survivors)) == 1
                return (
                    took,
                    new,
                    sum(w.maintenance.stats.reclaimed for w in survivors if w.maintenance),
                )
            finally:
                await stop(survivors, tasks)

        took, new, reclaimed = asyncio.run(main())
    finally:
        if victim.poll() is None:
            victim.kill()
        _, stderr = victim.communicate(timeout=10)
    assert victim.returncode == -signal.SIGKILL
    assert took <= 1.0 + 0.34 + 1.5, f"takeover took {took:.2f}s"
    # Every worker reclaims expired leases (not only the leader), so any survivor may have.
    assert new.maintenance is not None and reclaimed >= 1
    assert ran == [(job_id, 2)]
    status, attempts = db.execute(
        f'SELECT status, attempts FROM "{app.schema}".jobs WHERE id = %s', (job_id,)
    ).fetchone()
    assert (status, attempts) == ("done", 2), stderr.decode()[-2000:]


def test_a_worker_says_which_periodic_tasks_it_leaves_to_others(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that serves none of a periodic task's queue never enqueues its ticks; if every
    worker is like it, the task never runs: the worker says so when it starts."""

    @app.periodic(every=60.0, name="sweep", queue="cron")
    def sweep() -> None: ...

    @app.periodic(every=60.0, name="ping", queue="mail")
    def ping() -> None: ...

    caplog.set_level("INFO", logger="skiplock")
    asyncio.run(asyncio.wait_for(Worker(app, queues=["mail"], burst=True).run(), 30))
    said = [r.getMessage() for r in caplog.records if "not enqueued" in r.getMessage()]
    assert len(said) == 1 and "sweep (queue cron)" in said[0], caplog.text
    assert "ping" not in said[0], said
