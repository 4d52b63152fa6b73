"""Primary failover in its quick mode: a scratch primary and streaming standby, two worker
processes and a producer on a multi-host DSN, the primary stopped ``-m immediate`` mid-drain
and the standby promoted (chaos_scenarios.scenario_failover).  ``python tests/chaos/run.py
--failover --full`` runs the same at full size and writes its section of docs/reliability.md.

For the last second before the failure the standby receives nothing (its replication
connection's packets are dropped, where iptables can: else the notes say so), as a lagging
standby would.  The guarantees (docs/operations.md, "High availability"): with synchronous
replication no acknowledged enqueue and no reported outcome is lost; asynchronously only what
was acknowledged during the lag is; whatever the replication, nothing is left stuck, both
workers carry on without a restart, and the jobs that run twice are within the bound the
failure explains."""

from __future__ import annotations

import os

import pytest
from chaos_harness import Result
from chaos_scenarios import FAILOVER_SCENARIOS

from helpers import machine
from helpers.scratch_pg import ServerUnavailable

pytestmark = pytest.mark.slow


def run_quick(name: str, pg_dsn: str) -> Result:
    try:
        result = FAILOVER_SCENARIOS[name](pg_dsn, False)
    except ServerUnavailable as exc:
        if os.environ.get("SKIPLOCK_REQUIRE_FAILOVER"):  # where CI must run it
            raise
        pytest.skip(f"no scratch primary and standby here: {str(exc)[:300]}")
    print(f"\n{result.summary()}")
    # CI: the lag must be simulated, with iptables, which needs root (as a normal user the
    # scenario runs without it, and its notes say so).
    if os.environ.get("SKIPLOCK_REQUIRE_IPTABLES") and machine.is_root():
        assert result.notes["standby_lag_seconds"] is not None, result.notes
    return result


@pytest.mark.parametrize("level", ["on", "remote-apply"])
def test_synchronous_failover_loses_no_acknowledged_work(pg_dsn: str, level: str) -> None:
    result = run_quick(f"failover-{level}", pg_dsn)
    assert result.lost == 0, result.notes
    assert result.notes["acknowledged_enqueues_lost"] == 0, result.notes
    assert result.notes["outcomes_rolled_back"] == 0, result.notes
    assert result.stuck == 0 and result.stale == 0, result.notes
    assert result.duplicates is not None and result.bound is not None
    assert result.duplicates <= result.bound, result.notes
    assert not result.failures, result.failures


def test_asynchronous_failover_loses_what_the_standby_had_not_received(pg_dsn: str) -> None:
    """Asynchronously, the enqueues acknowledged while the standby received nothing are gone,
    and only those (the scenario checks that none acknowledged before the lag is lost);
    nothing is left stuck and the workers carry on."""
    result = run_quick("failover-async", pg_dsn)
    assert result.stuck == 0, result.notes
    assert result.notes["failure_to_claims_resumed_seconds"] is not None, result.notes
    if result.notes["standby_lag_seconds"] is not None and result.notes["acknowledged_during_lag"]:
        assert result.notes["acknowledged_enqueues_lost"] > 0, result.notes
    assert not result.failures, result.failures
