# ruff: noqa: RUF001, RUF003  (the report's figures use its typographic signs)
"""The report's CPU bound: how fast a drain could go if every core ran only it, at the CPU per
job (worker + PostgreSQL) it was measured to cost; shown beside each ceiling target."""

from __future__ import annotations

from typing import Any

import pytest
from bench.plan import make_plan
from bench.report import cpu_bound, targets


def drain(setting: str, jobs_per_s: float, worker: float, pg: float, **more: Any) -> dict[str, Any]:
    return {
        "workload": "drain", "system": "skiplock", "setting": setting, "size": 20000,
        "jobs_per_s": jobs_per_s, "xacts_per_job": 0.02, "worker_cpu_us_per_job": worker,
        "pg_cpu_us_per_job": pg, "verified": True, **more,
    }  # fmt: skip


def ceiling(jobs_per_s: float, clients: int) -> dict[str, Any]:
    return {
        "workload": "ceiling", "system": "sql-ceiling", "batch": 100, "mode": "done",
        "clients": clients, "jobs_per_s": jobs_per_s, "verified": True,
    }  # fmt: skip


def test_the_bound_divides_the_cores_by_the_cpu_per_job() -> None:
    rows = [drain("default", 30_000, 20.0, 30.0)]
    assert cpu_bound(rows, 2) == (40_000, 20.0, 30.0)
    assert cpu_bound(rows, 4) == (80_000, 20.0, 30.0)


def test_the_bound_takes_the_median_of_the_verified_runs() -> None:
    rows = [
        drain("default", 30_000, 10.0, 10.0),
        drain("default", 30_000, 20.0, 30.0),
        drain("default", 30_000, 30.0, 50.0),
        drain("default", 1, 1.0, 1.0, verified=False),  # not verified: not counted
    ]
    assert cpu_bound(rows, 2) == (40_000, 20.0, 30.0)


@pytest.mark.parametrize(
    ("rows", "cpus"),
    [
        ([drain("default", 30_000, 20.0, 30.0)], None),  # the machine's cores unknown
        ([drain("default", 30_000, 20.0, float("nan"))], 2),  # PG CPU not measured
        ([{k: v for k, v in drain("default", 1, 1, 1).items() if k != "pg_cpu_us_per_job"}], 2),
        ([drain("default", 30_000, 0.0, 0.0)], 2),
        ([], 2),
    ],
)
def test_no_bound_without_the_figures(rows: list[dict[str, Any]], cpus: int | None) -> None:
    assert cpu_bound(rows, cpus) is None


def ceiling_target(cpus: int | None) -> str:
    plan = make_plan(quick=True, repeat=1)
    plan.drain_settings = [s for s in plan.drain_settings if s.label == "default"]
    results = [drain("default", 30_000, 20.0, 30.0), ceiling(60_000, 1), ceiling(66_000, 4)]
    (row,) = [r for r in targets(results, plan, cpus) if "of the SQL ceiling" in r[0]]
    return row[1]


def test_each_ceiling_target_shows_the_bound_and_what_the_target_needs() -> None:
    figure = ceiling_target(2)
    assert figure.startswith("ceiling 66,000 / skiplock 30,000 = 2.20×")
    # 2 cores ÷ 50 µs per job; the target (within 1.5×) needs 66,000 / 1.5
    assert "CPU bound 40,000 jobs/s (2 cores ÷ 20 + 30 µs of worker + PG CPU per job)" in figure
    assert figure.endswith("the target needs 44,000")


def test_no_bound_is_shown_where_the_cores_are_unknown() -> None:
    assert ceiling_target(None) == "ceiling 66,000 / skiplock 30,000 = 2.20×"
