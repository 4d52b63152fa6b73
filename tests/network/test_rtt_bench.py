"""``python -m bench.rtt --quick``: the round-trip benchmark's workers in a network namespace
behind the delaying proxy, small counts, one drain at RTT 5 ms; only that every job ran exactly
once (the drain's own checks) and that the table is printed.  The latency workload it also runs
is the main benchmark's (tests/e2e/test_bench.py runs it).  Root only: skipped otherwise."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from bench.hosts import unavailable
from psycopg import sql

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_the_quick_rtt_benchmark_runs_every_job_exactly_once(pg_dsn: str) -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    name = f"skiplock_bench_rtt_{secrets.token_hex(4)}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.rtt", "--quick", "--dsn", pg_dsn, "--database", name,
             "--settings", "skiplock/default", "--rtts", "5", "--jobs", "500", "--no-latency"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "NOT VERIFIED" not in proc.stdout
    assert "| skiplock/default | 5 |" in proc.stdout
