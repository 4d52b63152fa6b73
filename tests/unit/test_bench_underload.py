# ruff: noqa: RUF001  (the report's figures use its typographic signs)
"""The bench's latency under load (issue 48, item 4) and its Dramatiq peer without a database or
a broker: the plan's settings, the worker command lines, and how the report shows the figures
and holds skiplock to the issue's targets (the runs themselves are in tests/e2e/test_bench.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.plan import DRAMATIQ_DRAIN, UNDERLOAD, make_plan
from bench.report import targets, underload_section
from bench.systems import SYSTEMS, DramatiqRabbit, DramatiqRedis


def test_every_system_serves_the_second_queue_and_has_a_backlog_size() -> None:
    for quick in (True, False):
        plan = make_plan(quick=quick, repeat=None)
        assert {s.system for s in plan.underload_settings} == set(plan.underload_jobs)
        assert all(s.other_queue for s in plan.underload_settings)
        assert all(s.system in SYSTEMS for s in plan.underload_settings)
    # the full plan: every system, the backlog where a system drains it in seconds
    full = make_plan(quick=False, repeat=None)
    assert full.underload_settings == UNDERLOAD
    # Celery and Dramatiq on each of their brokers, Redis and RabbitMQ
    assert {s.system for s in UNDERLOAD} == set(SYSTEMS) - {"sql-floor"}
    assert full.underload_jobs["skiplock"] == 100_000


def test_dramatiqs_worker_consumes_the_second_queue_only_where_the_workload_has_one() -> None:
    system = DramatiqRedis()
    drain, loaded = DRAMATIQ_DRAIN[0], next(s for s in UNDERLOAD if s.system == system.name)
    (cmd,) = system.worker_commands(None, drain)  # type: ignore[arg-type]
    assert cmd[cmd.index("--queues") + 1 :] == ["bench"]
    assert cmd[cmd.index("--processes") + 1] == "2" and cmd[cmd.index("--threads") + 1] == "8"
    (cmd,) = system.worker_commands(None, loaded)  # type: ignore[arg-type]
    assert cmd[cmd.index("--queues") + 1 :] == ["bench", "bench-other"]
    assert "dramatiq_queue_prefetch" not in system.worker_env(drain)  # its default
    assert system.worker_env(DRAMATIQ_DRAIN[1])["dramatiq_queue_prefetch"] == "100"
    assert system.ready(Path("/nonexistent"), drain) is False


def row(system: str, setting: str, **kinds: tuple[float, float]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "workload": "underload", "system": system, "setting": setting, "rep": 0,
        "size": 1000, "jobs": 1000, "backlog_jobs_per_s": 5000.0, "kinds": sorted(kinds),
        "verified": True,
    }  # fmt: skip
    for kind, (p50, p99) in kinds.items():
        out |= {f"{kind}_p50_ms": p50, f"{kind}_p99_ms": p99, f"{kind}_jobs": 40}
    return out


def test_the_report_holds_skiplock_to_25_ms_p99_and_shows_the_peers_against_it() -> None:
    results = [
        row("skiplock", "default", urgent=(10.0, 20.0), other=(15.0, 30.0)),
        row("pgqueuer", "b10x1", urgent=(20.0, 60.0), other=(30.0, 90.0)),
        row("dramatiq-redis", "p2-t8", other=(3.0, 6.0)),
    ]
    lines = {t[0]: t for t in targets(results, make_plan(quick=True, repeat=None))}
    urgent = lines["Under load: a higher-priority job starts within 25 ms p99"]
    assert urgent[1:] == ["20 ms (p50 10 ms)", "**met**"]
    other = lines["Under load: the other queue's job starts within 25 ms p99"]
    assert other[1:] == ["30 ms (p50 15 ms)", "**missed**"]
    section = underload_section(results)
    (pq,) = [line for line in section.splitlines() if line.startswith("| pgqueuer")]
    assert "| 20 / 60 (2.00× / 3.00×) | 40 | 30 / 90 (2.00× / 3.00×) | 40 | yes |" in pq
    (dq,) = [line for line in section.splitlines() if line.startswith("| dramatiq-redis")]
    assert "| – | – | 3 / 6 (0.20× / 0.20×) | 40 | yes |" in dq  # no priority row


def test_dramatiq_on_rabbitmq_names_its_queues_after_the_bench_database() -> None:
    """RabbitMQ has no key namespace: two runs at once (another checkout's, a test's) would share
    queues named "bench" and take each other's jobs."""
    from bench.db import BenchDatabase

    system = DramatiqRabbit()
    db = BenchDatabase("postgresql://postgres@127.0.0.1:5432/postgres", "skiplock_bench_x")
    system.queue = f"bench-{db.name}"  # what install() sets, without a broker
    (cmd,) = system.worker_commands(db, UNDERLOAD[-1])
    assert cmd[cmd.index("--queues") + 1 :] == [
        "bench-skiplock_bench_x",
        "bench-skiplock_bench_x-other",
    ]
    env = system.worker_env(DRAMATIQ_DRAIN[2])
    assert env["BENCH_DRAMATIQ_QUEUE"] == "bench-skiplock_bench_x"
    assert env["BENCH_DRAMATIQ_BROKER"].startswith("amqp://")
