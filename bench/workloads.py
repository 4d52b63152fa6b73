"""The workloads: enqueue, drain, real work, latency, latency under load, long transaction.

Each function runs one measurement of one setting on a freshly created database and returns a
flat dict of figures plus ``verified`` (every job ran exactly once, none failed: checked in the
handlers' own records and in the system's tables) and ``problems`` (what did not check out).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .db import COUNTER_XACTS, BenchDatabase, Counters, connect, read_counters
from .runner import CpuTracker, Monitor, Sample, Workers
from .system_base import Brokered
from .systems import Setting, System
from .wire import CountingProxy, WireCounts

POLL = 0.02  # seconds between monitor samples while jobs run

# Called with the started workers' pids; returns what to call once they have exited.
Attach = Callable[[list[int]], Callable[[], None]]


@dataclass
class Context:
    db: BenchDatabase
    log_dir: Path
    quick: bool
    # Set (the smoke run, ``python -m bench --quick``): each system's schema is installed once,
    # in a database of its own kept here by system, and every fresh database of that system is a
    # copy of it (CREATE DATABASE ... TEMPLATE) instead of an install of its own.  The caller
    # drops them (:func:`drop_templates`).
    templates: dict[str, BenchDatabase] | None = None


def fresh(ctx: Context, system: System) -> None:
    if ctx.templates is None or isinstance(system, Brokered):  # a broker's queues: per run
        ctx.db.recreate()
        system.install(ctx.db)
        return
    template = ctx.templates.get(system.name)
    if template is None:
        template = BenchDatabase(
            ctx.db.server_dsn, f"{ctx.db.name}_{system.name.replace('-', '_')}"
        )
        template.recreate()
        system.install(template)
        ctx.templates[system.name] = template
    ctx.db.recreate(template=template.name)


def drop_templates(ctx: Context) -> None:
    for template in (ctx.templates or {}).values():
        template.drop()


async def _enqueue_many(system: System, db: BenchDatabase, numbers: range, batch: int) -> float:
    producer = await system.producer(db)
    try:
        t0 = time.perf_counter()
        for i in range(numbers.start, numbers.stop, batch):
            await producer.many(range(i, min(i + batch, numbers.stop)))
        return time.perf_counter() - t0
    finally:
        await producer.close()


def preload(ctx: Context, system: System, n: int, batch: int = 5000) -> float:
    seconds = asyncio.run(_enqueue_many(system, ctx.db, range(n), batch))
    with connect(ctx.db.dsn) as conn:
        conn.execute("ANALYZE")
    return seconds


def wait_backends_gone(mon: Monitor, quick: bool = False, timeout: float = 10.0) -> None:
    """Until no client backend is connected to the database but the monitor's (their statistics
    are flushed when they exit), and a moment more (not in a quick run)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = mon.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name <> 'bench-monitor'",
            (mon.db.name,),
        )
        if row is not None and row[0] == 0:
            break
        time.sleep(0.05)
    if not quick:
        time.sleep(0.2)


def check_records(numbers: list[int], expected: range) -> list[str]:
    problems = []
    if len(numbers) != len(expected):
        problems.append(f"handler ran {len(numbers)} times for {len(expected)} jobs")
    dupes = [n for n, c in Counter(numbers).items() if c > 1]
    if dupes:
        problems.append(f"{len(dupes)} jobs ran more than once (e.g. {sorted(dupes)[:5]})")
    missing = set(expected) - set(numbers)
    if missing:
        problems.append(f"{len(missing)} jobs never ran (e.g. {sorted(missing)[:5]})")
    return problems


def per_job(
    c0: Counters, c1: Counters, mon: Monitor, t_first: float, t_end: float, jobs: int
) -> dict[str, float]:
    """Costs per job: transactions and tuples (whole run), WAL and CPU (first start to end)."""
    d = c1.minus(c0)
    s0, s1 = mon.at(t_first), mon.at(t_end)
    jobs = max(jobs, 1)
    return {
        "xacts_per_job": max(0, d.xacts - mon.queries - COUNTER_XACTS) / jobs,
        "tuples_per_job": (d.tup_ins + d.tup_upd + d.tup_del) / jobs,
        "hot_share": d.tup_hot_upd / d.tup_upd if d.tup_upd else 0.0,
        "wal_bytes_per_job": (s1.wal - s0.wal) / jobs,
        **cpu_per_job(s0, s1, jobs),
    }


def cpu_per_job(s0: Sample, s1: Sample, jobs: int) -> dict[str, float]:
    """The workers' and their backends' CPU between two samples, per job."""
    jobs = max(jobs, 1)
    return {
        "worker_cpu_us_per_job": (s1.worker_cpu - s0.worker_cpu) * 1e6 / jobs,
        "pg_cpu_us_per_job": (s1.pg_cpu - s0.pg_cpu) * 1e6 / jobs,
    }


# -- 1. enqueue -----------------------------------------------------------------------------


async def _enqueue_timed(
    system: System, db: BenchDatabase, n: int, bulk: int | None
) -> tuple[float, float]:
    producer = await system.producer(db)
    try:
        if bulk:
            await producer.many(range(n, n + min(bulk, 100)))  # warm-up: connect, prepare
        else:
            await producer.one(n)
        cpu0 = time.thread_time()
        t0 = time.perf_counter()
        if bulk:
            for i in range(0, n, bulk):
                await producer.many(range(i, min(i + bulk, n)))
        else:
            for i in range(n):
                await producer.one(i)
        return time.perf_counter() - t0, time.thread_time() - cpu0
    finally:
        await producer.close()


def enqueue(ctx: Context, system: System, n: int, bulk: int | None) -> dict[str, Any]:
    """``n`` jobs, one transaction each (``bulk`` None) or ``bulk`` per bulk-API call."""
    fresh(ctx, system)
    c0 = read_counters(ctx.db.dsn, ctx.db.name)
    mon = Monitor(ctx.db, lambda: [], refresh_every=0.1)
    w0 = mon.sample()
    result: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            result.append(asyncio.run(_enqueue_timed(system, ctx.db, n, bulk)))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=produce)
    thread.start()
    while thread.is_alive():
        mon.sample()  # finds the producer's backend and follows its CPU
        thread.join(0.05)
    if errors:
        mon.close()
        raise errors[0]
    seconds, client_cpu = result[0]
    w1 = mon.samples[-1]
    warm = min(bulk, 100) if bulk else 1
    wait_backends_gone(mon, ctx.quick)
    total = mon.execute(f"SELECT count(*) FROM {system.table}")
    mon.close()
    c1 = read_counters(ctx.db.dsn, ctx.db.name)
    problems = []
    if total is None or total[0] != n + warm:
        problems.append(f"{system.table} holds {total and total[0]} rows, expected {n + warm}")
    d = c1.minus(c0)
    return {
        "jobs": n,
        "seconds": seconds,
        "jobs_per_s": n / seconds,
        "xacts_per_job": max(0, d.xacts - mon.queries - COUNTER_XACTS) / n,
        "wal_bytes_per_job": (w1.wal - w0.wal) / n,
        "client_cpu_us_per_job": client_cpu * 1e6 / n,
        "pg_cpu_us_per_job": (w1.pg_cpu - w0.pg_cpu) * 1e6 / n,
        "verified": not problems,
        "problems": problems,
    }


# -- 2. drain -------------------------------------------------------------------------------


def drain(
    ctx: Context,
    system: System,
    setting: Setting,
    n: int,
    timeout: float | None = None,
    count_statements: bool = False,
    attach: Attach | None = None,
    workers_db: BenchDatabase | None = None,
    prefix: Sequence[str] = (),
) -> dict[str, Any]:
    """Preload ``n`` jobs, start the workers, time first handler start -> nothing unfinished.

    With ``count_statements`` the workers connect through a :class:`CountingProxy` and the
    result has what they sent per job (statements, round trips, bytes), over their whole life;
    its timings are the proxy's, not the system's.  ``attach`` is called with the worker
    processes' pids once they are started (a profiler: ``bench/profile.py``); what it returns is
    called once they have exited.  ``workers_db`` is how the workers reach the database (default
    ``ctx.db``), ``prefix`` goes before their command lines (``ip netns exec NS``: bench/rtt.py).

    Gives up after ``timeout`` seconds (default 30 s + 10 ms per job: 100 jobs/s would do)."""
    timeout = timeout if timeout is not None else 30.0 + n / 100
    fresh(ctx, system)
    preload_s = preload(ctx, system, n)
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(CountingProxy(ctx.db.dsn)) if count_statements else None
        db = workers_db or ctx.db
        if proxy is not None:
            db = ctx.db.through(proxy.dsn_through(ctx.db.dsn))
        out = _drain(ctx, system, setting, n, timeout, db, preload_s, attach, prefix)
        if proxy is not None:
            out.update(wire_per_job(proxy.counts(), n))
        return out


def wire_per_job(counts: WireCounts, jobs: int) -> dict[str, Any]:
    jobs = max(jobs, 1)
    return {
        "statements_per_job": counts.statements / jobs,
        "round_trips_per_job": counts.round_trips / jobs,
        "bytes_to_server_per_job": counts.to_server / jobs,
        "bytes_to_client_per_job": counts.to_client / jobs,
        "connections": counts.connections,
    }


def _drain(
    ctx: Context,
    system: System,
    setting: Setting,
    n: int,
    timeout: float,
    workers_db: BenchDatabase,
    preload_s: float,
    attach: Attach | None = None,
    prefix: Sequence[str] = (),
) -> dict[str, Any]:
    workers = Workers(system, setting, workers_db, ctx.log_dir, prefix)
    c0 = read_counters(ctx.db.dsn, ctx.db.name)
    mon = Monitor(ctx.db, workers.pids, system.unfinished_sql)
    problems: list[str] = []
    try:
        t_launch = time.time()
        workers.start()
        detach = attach([p.pid for p in workers.procs]) if attach else None
        max_inflight = 0
        deadline = time.monotonic() + timeout
        i = 0
        while True:
            s = mon.sample()
            if i % 3 == 0:
                inflight = (
                    mon.execute(system.inflight_sql)[0]
                    if system.inflight_sql
                    else system.inflight()
                )
                max_inflight = max(max_inflight, int(inflight))
            i += 1
            pending = (
                s.probe if system.unfinished_sql else system.unfinished(workers.started_so_far(), n)
            )
            if not pending:
                break
            if not workers.alive():
                problems.append("a worker process exited early:\n" + workers.log_tail())
                break
            if time.monotonic() > deadline:
                problems.append(f"not drained after {timeout:.0f}s")
                break
            time.sleep(POLL)
        t_end = s.t
        # Costs run to a sample that has every backend in it (the workers are idle by now).
        t_costs = mon.finish().t
        codes = workers.stop()
        if detach is not None:
            detach()
        wait_backends_gone(mon, ctx.quick)
        mon.close()
        c1 = read_counters(ctx.db.dsn, ctx.db.name)
        with connect(ctx.db.dsn) as conn:
            problems += system.verify(conn, n, setting)
        numbers, starts = workers.records()
        problems += check_records(numbers, range(n))
        if any(c not in (0, None) for c in codes if c != -signal.SIGTERM) or any(
            c == -signal.SIGTERM and workers.ran_jobs(pid) for pid, c in workers.exits()
        ):
            # A process the SIGTERM found still starting (a short drain that the other
            # processes finished) dies of it before installing its handler: harmless if it
            # never ran a job; one that did would also show in the records.
            problems.append(f"worker exit codes {codes}")
        t_first = min(starts) if starts else t_end
        seconds = t_end - t_first if starts and not problems else float("nan")
        return {
            "jobs": n,
            "seconds": seconds,
            "jobs_per_s": n / seconds,
            "startup_s": t_first - t_launch,
            "preload_s": preload_s,
            "max_inflight": max_inflight,
            **per_job(c0, c1, mon, t_first, t_costs, n),
            "verified": not problems,
            "problems": problems,
        }
    finally:
        if any(p.poll() is None for p in workers.procs):
            workers.stop(timeout=5)
        workers.cleanup()
        mon.close()


# -- real work ------------------------------------------------------------------------------


def work_ideal(setting: Setting, cores: int) -> float:
    """The most jobs/s a setting's work allows: concurrency x processes / job time (Celery's
    prefork pool: its concurrency is its processes); for CPU work, one job at a time per
    process (the GIL) and no more processes than cores."""
    from .apps.work import parse

    kind, seconds = parse(setting.work)
    if setting.pool == "prefork":  # Celery's: one job at a time in each of its child processes
        processes = slots = setting.concurrency or 1
    else:
        processes = setting.processes
        slots = (setting.concurrency or 10) * processes
    if kind == "cpu":
        slots = min(slots, processes, cores)
    return slots / seconds


def real_work(ctx: Context, system: System, setting: Setting, n: int, cores: int) -> dict[str, Any]:
    """A drain of ``n`` jobs whose handlers do ``setting.work``, against its ideal rate."""
    from .apps.work import parse

    out = drain(ctx, system, setting, n, timeout=30.0 + n / 50)  # 50 jobs/s would do
    ideal = work_ideal(setting, cores)
    out["kind"] = parse(setting.work)[0]
    out["ideal_jobs_per_s"] = ideal
    out["efficiency"] = out["jobs_per_s"] / ideal
    return out


def work_floor(setting: Setting, n: int, cores: int) -> dict[str, Any]:
    """The same I/O work with no queue (``bench.apps.work.floor`` in a process of its own):
    how close to the ideal the event loop's timers or the threads' wake-ups get here now.
    A setting without a concurrency runs the CLI's default, 10 (as :func:`work_ideal` counts)."""
    from .apps.work import parse
    from .systems import PY, REPO

    kind, _ = parse(setting.work)
    proc = subprocess.run(
        [PY, "-m", "bench.apps.work", setting.work, str(setting.concurrency or 10), str(n)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    rate = float(proc.stdout.strip())
    ideal = work_ideal(setting, cores)
    return {
        "jobs": n,
        "jobs_per_s": rate,
        "kind": kind,
        "ideal_jobs_per_s": ideal,
        "efficiency": rate / ideal,
        "verified": True,  # the slots took exactly n jobs between them
        "problems": [],
    }


# -- 3. latency -----------------------------------------------------------------------------


async def _paced_enqueue(
    system: System,
    db: BenchDatabase,
    rate: float,
    seconds: float,
    started: Callable[[], int] | None = None,
) -> dict[int, float]:
    producer = await system.producer(db)
    sent: dict[int, float] = {}
    try:
        await producer.one(-1)  # warm-up (connection), not measured
        # Until a handler has run it (``started``): the workers are up, whatever their start-up
        # took on a loaded machine (else the first jobs measure it).
        deadline = time.monotonic() + 60
        while started is not None and started() < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        count = int(rate * seconds)
        t0 = time.monotonic()
        for n in range(count):
            target = t0 + n / rate
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[n] = time.time()
            await producer.one(n)
        return sent
    finally:
        await producer.close()


def latency(
    ctx: Context,
    system: System,
    setting: Setting,
    rate: float,
    seconds: float,
    workers_db: BenchDatabase | None = None,
    prefix: Sequence[str] = (),
    producer_db: BenchDatabase | None = None,
) -> dict[str, Any]:
    """Idle workers; single enqueues at ``rate``/s: enqueue call -> handler start.  The workers
    reach the database by ``workers_db`` with ``prefix`` before their command lines, the
    producer by ``producer_db`` (both default ``ctx.db``: see :func:`drain`)."""
    fresh(ctx, system)
    workers = Workers(system, setting, workers_db or ctx.db, ctx.log_dir, prefix)
    problems: list[str] = []
    mon: Monitor | None = None
    try:
        workers.start()
        # started, connected, listening, idle (quick: _paced_enqueue's warm-up job still waits
        # for a worker's first start)
        time.sleep(0.5 if ctx.quick else 3.0)
        ready_by = time.monotonic() + 60
        while not system.ready(workers.record_dir, setting) and time.monotonic() < ready_by:
            time.sleep(0.1)
        if not workers.alive():
            problems.append("a worker process exited early:\n" + workers.log_tail())
        # What the workers and their backends spend per job at this rate (one claim and one
        # write per job, or so, where a drain shares each among hundreds), idle time included.
        mon = Monitor(ctx.db, workers.pids)
        s0 = mon.sample()
        sent = asyncio.run(
            _paced_enqueue(system, producer_db or ctx.db, rate, seconds, workers.started_so_far)
        )
        if ctx.quick:  # until every job sent (and the warm-up) has started, at most 1 s
            until = time.monotonic() + 1.0
            while workers.started_so_far() < len(sent) + 1 and time.monotonic() < until:
                time.sleep(0.02)
            time.sleep(0.1)  # the last one finished
        else:
            time.sleep(1.0)
        s1 = mon.finish()
        workers.stop()
        numbers, starts = workers.records()
        got = {n: t for n, t in zip(numbers, starts, strict=True) if n >= 0}
        problems += check_records([n for n in numbers if n >= 0], range(len(sent)))
        with connect(ctx.db.dsn) as conn:
            problems += system.verify(conn, len(sent) + 1, setting)
        lat = sorted((got[n] - sent[n]) * 1000 for n in sent if n in got)
        return {
            "jobs": len(sent),
            "p50_ms": quantile(lat, 0.50),
            "p95_ms": quantile(lat, 0.95),
            "p99_ms": quantile(lat, 0.99),
            "max_ms": lat[-1] if lat else float("nan"),
            **cpu_per_job(s0, s1, len(sent)),
            "samples_ms": lat,
            "verified": not problems,
            "problems": problems,
        }
    finally:
        if mon is not None:
            mon.close()
        workers.stop(timeout=5)
        workers.cleanup()


# -- 4. latency under load ------------------------------------------------------------------

TRICKLE_KINDS = ("urgent", "other")  # Producer.urgent, Producer.other


async def _trickle(
    system: System,
    db: BenchDatabase,
    first: int,
    rate: float,
    seconds: float,
    started: Callable[[], int],
) -> tuple[dict[str, dict[int, float]], int]:
    """Once the workers have started the backlog's jobs (``0 .. first-1``), each kind of
    trickled job the system has at ``rate``/s, interleaved, numbered from ``first``: until
    ``seconds`` have passed or every job enqueued has started (the backlog is gone).  Returns
    the send time of each trickled job by kind, and how many jobs were enqueued in all (one
    warm-up per kind, not timed)."""
    producer = await system.producer(db)
    sent: dict[str, dict[int, float]] = {}
    n = first
    try:
        deadline = time.monotonic() + 60
        while started() < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        kinds = []
        for kind in TRICKLE_KINDS:
            try:
                await getattr(producer, kind)(n)  # warm-up: connection, prepared statements
            except NotImplementedError:
                continue
            n += 1
            kinds.append(kind)
            sent[kind] = {}
        step = 1 / (rate * len(kinds)) if kinds else 0.0
        t0 = time.monotonic()
        for i in range(int(rate * seconds) * len(kinds)):
            if started() >= n:  # every job enqueued has started: no backlog left
                break
            delay = t0 + i * step - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            kind = kinds[i % len(kinds)]
            sent[kind][n] = time.time()
            await getattr(producer, kind)(n)
            n += 1
        return sent, n
    finally:
        await producer.close()


def _unfinished(system: System, mon: Monitor, started: int, expected: int) -> bool:
    if system.unfinished_sql:
        return bool(mon.execute(system.unfinished_sql)[0])
    return system.unfinished(started, expected)


def under_load(
    ctx: Context, system: System, setting: Setting, n: int, rate: float, seconds: float
) -> dict[str, Any]:
    """Enqueue -> start of jobs trickled while a backlog drains (issue 48, item 4).

    ``n`` jobs preloaded on the busy queue, the workers (serving that queue and a second one)
    started; once they run the backlog, single enqueues at ``rate``/s each of a job of higher
    priority on the busy queue (``urgent``) and of a job on the other queue (``other``), for
    ``seconds`` or until the backlog is gone.  The latencies count the jobs sent before the
    backlog's last job started (under load); the rest are verified but not timed."""
    fresh(ctx, system)
    preload_s = preload(ctx, system, n)
    workers = Workers(system, setting, ctx.db, ctx.log_dir)
    mon: Monitor | None = None
    problems: list[str] = []
    try:
        workers.start()
        sent, total = asyncio.run(
            _trickle(system, ctx.db, n, rate, seconds, workers.started_so_far)
        )
        mon = Monitor(ctx.db, workers.pids)
        deadline = time.monotonic() + 30 + n / 100
        while _unfinished(system, mon, workers.started_so_far(), total):
            if not workers.alive():
                problems.append("a worker process exited early:\n" + workers.log_tail())
                break
            if time.monotonic() > deadline:
                problems.append("not drained in time")
                break
            time.sleep(POLL)
        workers.stop()
        numbers, starts = workers.records()
        problems += check_records(numbers, range(total))
        with connect(ctx.db.dsn) as conn:
            problems += system.verify(conn, total, setting)
        start_of = dict(zip(numbers, starts, strict=True))
        backlog = [start_of[i] for i in range(n) if i in start_of]
        t_first, t_last = (min(backlog), max(backlog)) if backlog else (0.0, 0.0)
        out: dict[str, Any] = {
            "jobs": n,
            "preload_s": preload_s,
            "backlog_jobs_per_s": n / (t_last - t_first) if t_last > t_first else float("nan"),
            "rate": rate,
            "kinds": sorted(sent),
        }
        for kind, times in sent.items():
            lat = sorted((start_of[k] - t) * 1000 for k, t in times.items() if k in start_of)
            loaded = sorted(
                (start_of[k] - t) * 1000 for k, t in times.items() if k in start_of and t < t_last
            )
            out[f"{kind}_sent"] = len(times)
            out[f"{kind}_jobs"] = len(loaded)  # sent while the backlog drained
            out[f"{kind}_p50_ms"] = quantile(loaded, 0.50)
            out[f"{kind}_p99_ms"] = quantile(loaded, 0.99)
            out[f"{kind}_max_ms"] = loaded[-1] if loaded else float("nan")
            out[f"{kind}_samples_ms"] = loaded
            if not loaded and lat:
                problems.append(f"no {kind} job was sent before the backlog's last started")
        out["verified"] = not problems
        out["problems"] = problems
        return out
    finally:
        if mon is not None:
            mon.close()
        workers.stop(timeout=5)
        workers.cleanup()


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


# -- 5. long transaction --------------------------------------------------------------------


async def _sustain(
    system: System,
    db: BenchDatabase,
    stop_at: float,
    backlog: int,
    batch: int,
    started: Callable[[], int],
) -> int:
    """Keep about ``backlog`` jobs not yet started until ``stop_at``; returns jobs enqueued.

    Progress comes from the handlers' own counts (``started``), not from the table: counting
    a queue's pending rows walks the index entries of every job claimed since the held
    snapshot began, and polled every 50 ms that count kept one server process busy most of the
    time during the hold, taking CPU from the system under test.
    """
    producer = await system.producer(db)
    n = 0
    try:
        while time.time() < stop_at:
            waiting = n - started()
            if waiting < backlog:
                while waiting < backlog:
                    await producer.many(range(n, n + batch))
                    n += batch
                    waiting += batch
            else:
                await asyncio.sleep(0.05)
        return n
    finally:
        await producer.close()


def long_transaction(
    ctx: Context,
    system: System,
    setting: Setting,
    before: float,
    during: float,
    after: float,
    backlog: int = 2000,
    batch: int = 500,
) -> dict[str, Any]:
    """Sustained enqueue + drain; a REPEATABLE READ session holds its snapshot in the middle."""
    fresh(ctx, system)
    workers = Workers(system, setting, ctx.db, ctx.log_dir)
    problems: list[str] = []
    timeline: list[dict[str, float]] = []
    holder = connect(ctx.db.dsn)
    stats = connect(ctx.db.dsn)
    schema, _, table = system.table.rpartition(".")
    try:
        workers.start()
        time.sleep(1.0 if ctx.quick else 2.0)  # started and idle
        t0 = time.time()
        t_hold, t_release, t_stop = t0 + before, t0 + before + during, t0 + before + during + after

        async def run() -> int:
            producer = asyncio.create_task(
                _sustain(system, ctx.db, t_stop, backlog, batch, workers.started_so_far)
            )
            held = False
            while not producer.done():
                now = time.time()
                if not held and now >= t_hold:
                    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    holder.execute(f"SELECT count(*) FROM {system.table}")
                    held = True
                if held and now >= t_release and holder.info.transaction_status:
                    holder.execute("COMMIT")
                stats.execute("SELECT pg_stat_clear_snapshot()")
                row = stats.execute(
                    "SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid)"
                    " FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
                    (schema or "public", table),
                ).fetchone()
                if row:
                    timeline.append(
                        {"t": now - t0, "dead": row[0], "live": row[1], "bytes": row[2]}
                    )
                await asyncio.sleep(0.25 if ctx.quick else 1.0)  # quick: its 0.5 s windows
            return await producer

        enqueued = asyncio.run(run())
        if holder.info.transaction_status:
            holder.execute("COMMIT")
        # Let the workers finish what is queued, then stop them and count.
        drain_deadline = time.time() + 120
        with connect(ctx.db.dsn) as conn:
            while time.time() < drain_deadline:
                row = conn.execute(system.unfinished_sql).fetchone()
                if row is not None and not row[0]:
                    break
                time.sleep(0.1)
        workers.stop()
        numbers, starts = workers.records()
        problems += check_records(numbers, range(enqueued))
        with connect(ctx.db.dsn) as conn:
            problems += system.verify(conn, enqueued, setting)
        settle = min(2.0, before / 3)  # skip each window's first moments
        windows = {
            "before": (t0 + settle, t_hold),
            "during": (t_hold + settle, t_release),
            "after": (t_release + settle, t_stop),
        }
        rates = {}
        for name, (a, b) in windows.items():
            done = sum(1 for t in starts if a <= t < b)
            rates[name] = done / (b - a) if b > a else float("nan")
        per_second = Counter(int(t - t0) for t in starts)
        return {
            "jobs": enqueued,
            "before_jobs_per_s": rates["before"],
            "during_jobs_per_s": rates["during"],
            "after_jobs_per_s": rates["after"],
            "during_over_before": rates["during"] / rates["before"] if rates["before"] else 0,
            "max_dead_tuples": max((p["dead"] for p in timeline), default=0),
            "timeline": timeline,
            "throughput_timeline": [
                per_second.get(i, 0) for i in range(int(before + during + after))
            ],
            "hold": [before, before + during],
            "verified": not problems,
            "problems": problems,
        }
    finally:
        workers.stop(timeout=5)
        workers.cleanup()
        holder.close()
        stats.close()


__all__ = [
    "Context",
    "CpuTracker",
    "drain",
    "enqueue",
    "latency",
    "long_transaction",
    "under_load",
]
