"""Limits per key value (a tenant, an API token): at most N of its jobs running and at most R
starts per period, across tasks, queues and worker processes; jobs without a limited key run as
before."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from skiplock import App, Worker

pytestmark = pytest.mark.smoke

# A worker process: two tasks in two queues, each run recorded (key, start, end) in a file.
WORKER_SCRIPT = r"""
import asyncio, os, sys, time
import psycopg
from psycopg import sql
from skiplock import App, Worker

app = App(os.environ["DSN"], os.environ["SCHEMA"])
out = open(sys.argv[1], "a", buffering=1)

async def run(key: str, seconds: float) -> None:
    start = time.time()
    await asyncio.sleep(seconds)
    out.write(f"{key} {start} {time.time()}\n")

@app.task(name="one", queue="qa")
async def one(key: str, seconds: float) -> None:
    await run(key, seconds)

@app.task(name="two", queue="qb")
async def two(key: str, seconds: float) -> None:
    await run(key, seconds)

async def main() -> None:
    # Not a burst: a worker whose keys are all at their limits would find nothing to claim and
    # end.  It stops once every job is finished.
    worker = Worker(app, queues=["qa", "qb"], concurrency=8, poll_interval=0.05)
    task = asyncio.create_task(worker.run())
    unfinished = sql.SQL(
        "SELECT count(*) FROM {} WHERE status NOT IN ('done', 'failed', 'cancelled')"
    ).format(sql.Identifier(os.environ["SCHEMA"], "jobs"))
    with psycopg.connect(os.environ["DSN"], autocommit=True) as conn:
        while conn.execute(unfinished).fetchone()[0]:
            await asyncio.sleep(0.1)
    worker.stop()
    await task

asyncio.run(main())
"""


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def run_workers(app: App, tmp_path: Path, processes: int) -> dict[str, list[tuple[float, float]]]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema}
    outs = [tmp_path / f"runs-{i}.txt" for i in range(processes)]
    procs = [subprocess.Popen([sys.executable, str(script), str(out)], env=env) for out in outs]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    spans: dict[str, list[tuple[float, float]]] = {}
    for out in outs:
        for line in out.read_text().splitlines():
            key, start, end = line.split()
            spans.setdefault(key, []).append((float(start), float(end)))
    return spans


def enqueue_spread(app: App, key: str | None, count: int, seconds: float) -> None:
    """``count`` jobs with ``key`` as their limit_key, half in each queue and task (the worker
    processes' tasks, registered here too for the enqueue)."""
    if "one" not in app.tasks:

        @app.task(name="one", queue="qa")
        def one(key: str, seconds: float) -> None: ...

        @app.task(name="two", queue="qb")
        def two(key: str, seconds: float) -> None: ...

    payload: dict[str, Any] = {"key": key or "none", "seconds": seconds}
    for task, queue in (("one", "qa"), ("two", "qb")):
        app.enqueue_many(task, [payload] * (count // 2), limit_key=key, queue=queue)


def test_a_key_concurrency_limit_holds_across_worker_processes(app: App, tmp_path: Path) -> None:
    app.sync_client.set_key_limit("token:a", concurrency=2)
    app.sync_client.set_key_limit("token:b", concurrency=1)
    enqueue_spread(app, "token:a", 12, 0.15)
    enqueue_spread(app, "token:b", 6, 0.15)
    enqueue_spread(app, "token:free", 12, 0.15)  # a key without a limit
    enqueue_spread(app, None, 12, 0.15)
    spans = run_workers(app, tmp_path, processes=3)
    assert {k: len(v) for k, v in spans.items()} == {
        "token:a": 12,
        "token:b": 6,
        "token:free": 12,
        "none": 12,
    }
    assert peak_overlap(spans["token:a"]) == 2, "token:a ran more (or fewer) than 2 at once"
    assert peak_overlap(spans["token:b"]) == 1
    # Jobs without a limited key are not held back: 3 workers x 8 slots.
    assert peak_overlap(spans["token:free"]) > 2
    assert peak_overlap(spans["none"]) > 2


def test_a_key_rate_limit_spaces_its_starts_across_worker_processes(
    app: App, tmp_path: Path
) -> None:
    app.sync_client.set_key_limit("tenant:r", rate=4, period=1.0)
    enqueue_spread(app, "tenant:r", 12, 0.0)
    began = time.time()
    spans = run_workers(app, tmp_path, processes=2)
    starts = sorted(s for s, _ in spans["tenant:r"])
    assert len(starts) == 12
    # A full bucket of 4 at once, then 4 a second: the 12th start comes ~2 s after the first.
    assert starts[-1] - starts[0] >= 1.8, f"12 starts in {starts[-1] - starts[0]:.2f}s"
    for i in range(len(starts)):  # no window of 1 s holds more than bucket + refill
        in_window = [s for s in starts if starts[i] <= s < starts[i] + 1.0]
        assert len(in_window) <= 4 + 4 + 1, in_window
    assert time.time() - began < 20


def test_key_limits_are_set_listed_and_removed(app: App) -> None:
    client = app.sync_client
    client.set_key_limit("tenant:1", concurrency=3, rate=10, period=60)
    client.set_key_limit("tenant:2", concurrency=1)
    assert client.key_limits() == {
        "tenant:1": {"concurrency": 3, "rate": 10, "period": 60.0},
        "tenant:2": {"concurrency": 1, "rate": None, "period": None},
    }
    client.set_key_limit("tenant:1", concurrency=None)  # no limit left: the row goes
    assert set(client.key_limits()) == {"tenant:2"}
    with pytest.raises(ValueError):
        client.set_key_limit("tenant:2", concurrency=0)
    with pytest.raises(ValueError, match="limit_key"):
        client.set_key_limit("", concurrency=1)


def test_a_limited_key_waits_in_process_while_others_run(app: App) -> None:
    """One worker: the limited key's jobs run one at a time while the unlimited ones fill the
    slots, and every job is done at the end."""
    order: list[str] = []

    @app.task(name="t", queue="q")
    async def t(key: str) -> None:
        order.append(f"start {key}")
        await asyncio.sleep(0.05)
        order.append(f"end {key}")

    app.sync_client.set_key_limit("k", concurrency=1)
    t.with_options(limit_key="k").enqueue_many([{"key": "k"}] * 4)
    t.enqueue_many([{"key": "x"}] * 4)
    asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 20))
    running = 0
    for event in order:
        if event == "start k":
            running += 1
            assert running == 1, order
        elif event == "end k":
            running -= 1
    assert order.count("end k") == 4 and order.count("end x") == 4


def test_the_postgres_backend_claims_a_limited_key_within_its_limit(app: App) -> None:
    from helpers.backends import new_job
    from skiplock.backends import PostgresBackend

    app.sync_client.set_key_limit("k", concurrency=1)

    async def body() -> None:
        backend = PostgresBackend(app.dsn, app.schema)
        try:
            keyed = await backend.enqueue([new_job(limit_key="k") for _ in range(3)])
            free = await backend.enqueue([new_job() for _ in range(2)])
            first = await backend.claim(["q"], 10, "w1", 30)
            # One of the key's (its limit), both free ones.
            assert {j.id for j in first} == {keyed[0].id, *(e.id for e in free)}
            assert await backend.claim(["q"], 10, "w1", 30) == []
            (done,) = [j for j in first if j.id == keyed[0].id]
            assert await backend.complete([done.claim]) == {done.id}
            assert [j.id for j in await backend.claim(["q"], 10, "w1", 30)] == [keyed[1].id]
        finally:
            await backend.close()

    asyncio.run(body())


def test_a_worker_keeps_claiming_a_limited_keys_jobs_between_polls(app: App) -> None:
    """The claim of limited keys takes no more jobs than the slots can start, so a claim that
    comes up short of the worker's room does not mean the queues are empty: the worker claims
    again as its slots free, not only at the next poll."""
    done: list[int] = []

    @app.task(name="t", queue="q")
    async def t(n: int) -> None:
        await asyncio.sleep(0.01)
        done.append(n)

    app.sync_client.set_key_limit("k", concurrency=100)  # never binds here
    t.with_options(limit_key="k").enqueue_many([{"n": n} for n in range(20)])
    worker = Worker(app, concurrency=2, poll_interval=10)

    async def body() -> None:
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 5  # half a poll interval
        while len(done) < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        worker.stop()
        await task

    asyncio.run(body())
    assert len(done) == 20, f"{len(done)} of 20 ran before the next poll"


def test_a_limited_keys_jobs_run_in_a_queue_with_limits_of_its_own(app: App) -> None:
    """A queue with a concurrency limit of 3: its jobs of a key limited to 1 run one at a time,
    within the queue's limit too, beside the queue's other jobs (they were passed over by the
    queue's serialised claim, and stayed pending)."""
    running = {"k": 0, "all": 0}
    peak = {"k": 0, "all": 0}
    ran: list[str] = []

    @app.task(name="t", queue="lim")
    async def t(key: str) -> None:
        for name in {"all", key}:
            running[name] = running.get(name, 0) + 1
            peak[name] = max(peak.get(name, 0), running[name])
        await asyncio.sleep(0.02)
        for name in {"all", key}:
            running[name] -= 1
        ran.append(key)

    app.sync_client.set_concurrency_limit("lim", 3)
    app.sync_client.set_key_limit("k", concurrency=1)
    t.with_options(limit_key="k").enqueue_many([{"key": "k"}] * 4)
    t.enqueue_many([{"key": "x"}] * 6)
    asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    assert sorted(ran) == ["k"] * 4 + ["x"] * 6
    assert peak["k"] == 1 and peak["all"] <= 3, peak


def test_a_limited_backlog_is_walked_by_the_plain_claim_a_tenth_of_the_time_at_most(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plain claim passes a limited key's pending jobs over one by one.  While the claim of
    limited keys brings jobs and the plain claim finds none, the plain claim waits at least nine
    times as long as its last look took (whatever the fixed pause: here none), so that walking
    the backlog takes a tenth of the worker's claiming at most."""
    from skiplock.backends import postgres_claimer

    monkeypatch.setattr(postgres_claimer, "PLAIN_CLAIM_PAUSE", 0.0)

    @app.task(name="t", queue="q")
    async def t(n: int) -> None: ...

    app.sync_client.set_key_limit("k", concurrency=1_000_000)  # never binds
    for start in range(0, 10_000, 5_000):
        t.with_options(limit_key="k").enqueue_many([{"n": n} for n in range(start, start + 5_000)])
    worker = Worker(app, concurrency=2, poll_interval=10)
    plain = worker.store.job_claim
    spent: list[float] = []

    async def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        try:
            return await plain(*args, **kwargs)
        finally:
            spent.append(time.monotonic() - began)

    worker.store.job_claim = timed  # type: ignore[method-assign]

    async def body() -> float:
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)  # started, and claiming
        began, before = time.monotonic(), sum(spent)
        await asyncio.sleep(3)
        share = (sum(spent) - before) / (time.monotonic() - began)
        worker.stop()
        await task
        return share

    share = asyncio.run(body())
    assert worker.stats.claimed > 0
    assert share < 0.35, f"the plain claim took {share:.0%} of the time"
