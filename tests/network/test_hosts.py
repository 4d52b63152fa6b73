"""Workers on several "hosts" (network namespaces) a few milliseconds from the server, through
delaying proxies (hosts.py, delay_proxy.py).  Root only: skipped with the reason otherwise."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterator

import psycopg
import pytest
from bench.hosts import Hosts, unavailable
from chaos_harness import ChaosRun, check

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def can_run() -> Iterator[None]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    yield


def round_trips(dsn: str, n: int) -> list[float]:
    """Seconds per ``SELECT 1`` on one connection (after a warm-up)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(20):
            conn.execute("SELECT 1")
        times = []
        for _ in range(n):
            t = time.perf_counter()
            conn.execute("SELECT 1")
            times.append(time.perf_counter() - t)
    return times


def test_the_proxy_delays_each_round_trip_by_the_rtt_and_costs_little(
    pg_dsn: str, can_run: None
) -> None:
    """From the root namespace, through each host's proxy: at zero delay its own cost (round
    trip through the proxy minus direct, printed), at RTT 5 ms a round trip takes 5 ms more."""
    direct = statistics.median(round_trips(pg_dsn, 300))
    for rtt_ms in (0.0, 5.0):
        hosts = Hosts(pg_dsn, 1, rtt_ms)
        try:
            through = statistics.median(round_trips(hosts.hosts[0].dsn, 300 if rtt_ms == 0 else 60))
        finally:
            hosts.close()
        print(
            f"\nRTT {rtt_ms:g} ms: SELECT 1 p50 direct {direct * 1000:.3f} ms, through the proxy "
            f"{through * 1000:.3f} ms (+{(through - direct) * 1000:.3f} ms)"
        )
        if rtt_ms == 0:
            assert through - direct < 0.005  # a machine this loaded: generous
        else:
            assert rtt_ms / 1000 <= through < rtt_ms / 1000 + 0.010


def test_workers_on_two_hosts_5_ms_away_run_every_job_exactly_once(
    pg_dsn: str, can_run: None
) -> None:
    """One worker process in each of 2 namespaces, each through its own proxy at RTT 5 ms,
    drain one queue: every job runs exactly once (the chaos ledger), none lost or stuck."""
    hosts = Hosts(pg_dsn, 2, 5.0)
    run = ChaosRun(pg_dsn, "hosts")
    try:
        rng = random.Random()
        ids = run.enqueue("work", [{"ms": round(rng.uniform(2, 10), 1)} for _ in range(400)])
        procs = [
            run.start_worker(concurrency=4, lease=5.0, dsn=host.dsn, prefix=host.command())
            for host in hosts.hosts
        ]
        run.wait_started(procs)
        began = time.time()
        assert run.wait_drained(120)
        took = time.time() - began
        found = check(run, ids)
        by_pid = {p.pid: 0 for p in procs}
        for e in run.ledger():
            by_pid[e.pid] = by_pid.get(e.pid, 0) + 1
        print(f"\n400 jobs on 2 hosts at RTT 5 ms: {took:.1f} s, executions per worker {by_pid}")
        codes = run.stop_all()
    finally:
        run.close()
        hosts.close()
    assert (found.lost, found.stuck, found.stale) == ([], [], []), found
    assert found.duplicates == 0 and found.executions == len(ids), found
    assert all(n > 0 for n in by_pid.values()), by_pid  # both hosts took part
    assert set(codes.values()) == {0}, codes
