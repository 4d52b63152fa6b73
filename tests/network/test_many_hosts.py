"""Many hosts and a host cut off, in their quick mode (scenarios.py; ``python
tests/network/scenarios.py --full`` runs them at full size).  Root only, and iptables for the
cut: skipped with the reason otherwise (CI requires iptables, SKIPLOCK_REQUIRE_IPTABLES: its
absence fails the cut's test as root or as a normal user, who then skips it: needs root)."""

from __future__ import annotations

import json
import os

import pytest
from bench.hosts import cut_unavailable, unavailable
from scenarios import cut_host, many_hosts

from helpers import machine
from skiplock._db.connections import worker_connections

pytestmark = pytest.mark.slow


def test_three_hosts_of_two_processes_run_every_job_exactly_once(tcp_pg_dsn: str) -> None:
    """3 hosts x 2 worker processes drain one queue at RTT 2 ms while enqueuers on two of
    them add the jobs: every job once (the ledger), every process took part, and each holds
    a bounded number of sessions (its pool and its listener).  Over TCP (a scratch cluster
    when the tests' server is the embedded one, on a Unix socket): sessions are told apart by
    host through their client ports, which a Unix socket does not have."""
    machine.needs(None, root_for="network namespaces (ip netns)")
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    out = many_hosts(tcp_pg_dsn, full=False)["three"]
    print(f"\n{json.dumps(out)}")
    assert out["drained"], out
    assert (out["lost"], out["stuck"], out["stale"], out["duplicates"]) == (0, 0, 0, 0), out
    assert out["executions"] == out["jobs"] == 600, out
    assert len(out["executions_per_process"]) == 6 and min(out["executions_per_process"]) > 0
    assert len(out["sessions_per_host_most"]) == 3, out  # every host's sessions were seen
    # At most what skiplock doctor counts per worker process (its pool, listener and probe).
    assert 1 < out["sessions_per_process_most"] <= worker_connections(8), out
    assert out["exit_codes"] == [0], out


def test_a_host_cut_off_loses_nothing_and_its_late_outcomes_are_rejected(pg_dsn: str) -> None:
    """The maintenance leader's host is cut off for 3 s (lease 2 s) mid-drain, then restored:
    the jobs it held run elsewhere within the lease plus the reclaim interval and a claim,
    its late outcomes are rejected, nothing is lost or stuck, duplicates stay within what the
    cut explains, the leader terms never overlap, and each periodic tick runs once."""
    # CI sets SKIPLOCK_REQUIRE_IPTABLES: a missing iptables fails, as root or not (as a
    # normal user the test then skips); as root, where namespaces work, so does any reason.
    machine.needs(
        "SKIPLOCK_REQUIRE_IPTABLES",
        programs=[("iptables", "iptables")],
        root_for="network namespaces (ip netns) and iptables",
    )
    reason = cut_unavailable()
    if reason is not None:
        if os.environ.get("SKIPLOCK_REQUIRE_IPTABLES") and unavailable() is None:
            raise AssertionError(reason)
        pytest.skip(reason)
    out = cut_host(pg_dsn, full=False)
    print(f"\n{json.dumps(out, default=str)}")
    assert out["drained"], out
    assert (out["lost"], out["stuck"], out["stale"]) == (0, 0, 0), out
    assert out["duplicates"] <= out["duplicate_bound"], out
    assert out["leader_was_cut"], out
    if out["held_rerun_elsewhere"]:
        # The lease, the reclaim interval (half the lease) and a claim, on a loaded machine.
        assert out["held_rerun_after_cut_s_max"] <= out["lease_s"] * 1.5 + 3.0, out
    assert out["leader_overlaps_believed"] == [], out
    ticks = out["periodic_ticks"]
    assert ticks["ticks"] > 0 and ticks["run_twice"] == 0 and ticks["never_ran"] == 0, out
    assert out["exit_codes"] == [0], out
