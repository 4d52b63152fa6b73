"""The fault-injection suite in its quick mode (small sizes, a few faults each): real worker
processes, real signals, real PostgreSQL.  ``python tests/chaos/run.py --full`` runs the same
scenarios at full size and writes docs/reliability.md.

Each test runs one scenario of chaos_scenarios and asserts what the checker found: nothing
lost, nothing stuck, no stale write accepted, duplicates within what the faults explain, and
the scenario's own checks (``result.failures``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from chaos_harness import ChaosRun, Result, blackhole_available, check
from chaos_scenarios import SCENARIOS
from psycopg import sql

from helpers import machine
from helpers.polling import wait_for
from helpers.scratch_pg import find_pg_bindir
from skiplock import App, Worker, WorkerStats
from skiplock.events import JobEvent

pytestmark = pytest.mark.slow


def run_quick(name: str, pg_dsn: str) -> Result:
    result = SCENARIOS[name](pg_dsn, False)
    print(f"\n{result.summary()}")
    return result


def assert_sound(result: Result) -> None:
    assert result.lost == 0, result.notes
    assert result.stuck == 0, result.notes
    assert result.stale == 0, result.notes
    if result.duplicates is not None and result.bound is not None:
        assert result.duplicates <= result.bound, result.notes
    assert not result.failures, result.failures


@pytest.mark.parametrize("model", ["lease", "held"])
def test_kill_9_workers_during_a_drain(pg_dsn: str, model: str) -> None:
    result = run_quick(f"kill-{model}", pg_dsn)
    assert_sound(result)
    if model == "held":
        # A killed held-lock worker's rows unlock when its backend sees the socket close.
        assert result.p99 is not None and result.p99 < 10, result.recovery


@pytest.mark.parametrize("clock", ["prompt", "late"])
def test_a_held_job_killed_after_its_handler_returned_but_before_its_commit(
    pg_dsn: str, clock: str
) -> None:
    """A held-lock job is running until its outcome commits, not only while its handler runs:
    killed between the two (here the handler lingers after the ledger records its end, as a
    slow commit on a loaded machine leaves it), it rolls back and runs again, a duplicate the
    kill explains however long ago the handler returned.  Also when the harness reads the
    kill's time only after the rerun has started (``late``: a loaded machine schedules the
    harness after the workers; the rerun starts within milliseconds of the kill)."""
    run = ChaosRun(pg_dsn, "kill_commit")
    try:
        ids = run.enqueue("work", [{"ms": 10, "linger_ms": 30_000}])
        a = run.start_worker(concurrency=1, model="held")
        run.wait_started([a])
        wait_for(lambda: any(e.ended for e in run.ledger()), 30, "the handler to return")
        time.sleep(1.0)  # the handler returned a while ago; its commit is still ahead
        fault = run.kill(a)
        run.start_worker(concurrency=1, model="held")
        if clock == "late":
            wait_for(lambda: len(run.ledger()) == 2, 30, "the job to run again")
            fault.at = time.time()
        assert run.wait_drained(60)
        found = check(run, ids)
    finally:
        run.close()
    assert found.statuses == {"done": 1} and not (found.lost or found.stuck or found.stale)
    assert found.duplicates == 1
    assert found.bound == 1, found


def test_killed_leaders_jobs_run_again_within_the_documented_bound(pg_dsn: str) -> None:
    """docs/worker.md: after a kill -9, leased jobs "run again once their lease expires: after
    at most --lease seconds plus the reclaim interval", also when the dead worker was the
    maintenance leader: every worker reclaims, so nobody waits for its role to expire (10 s)."""
    assert_sound(run_quick("kill-leader", pg_dsn))


def test_sigstopped_worker_late_writes_are_rejected(pg_dsn: str) -> None:
    result = run_quick("stop", pg_dsn)
    assert_sound(result)
    assert result.notes["overlap_seconds_max"] is not None


def test_a_resumed_worker_cancels_its_runs_of_jobs_reclaimed_meanwhile(pg_dsn: str) -> None:
    """A worker frozen while it runs long jobs, until another one has reclaimed and runs them:
    once resumed, its heartbeat finds the leases reclaimed and it cancels its runs instead of
    letting them go on to their end beside the new ones."""
    assert_sound(run_quick("stop-long", pg_dsn))


def test_a_held_worker_stops_its_runs_whose_sessions_were_terminated(pg_dsn: str) -> None:
    """The sessions holding long held-lock jobs' transactions are terminated: the jobs are
    claimable again at once, and their worker stops its runs instead of letting them go on
    beside the new ones."""
    assert_sound(run_quick("terminate-held-long", pg_dsn))


def test_late_completion_racing_the_reclaim(pg_dsn: str) -> None:
    result = run_quick("race", pg_dsn)
    assert_sound(result)
    assert result.notes["inconsistent_final_states"] == 0


def test_terminated_sessions_reconnect(pg_dsn: str) -> None:
    assert_sound(run_quick("terminate-lease", pg_dsn))


@pytest.mark.parametrize("model", ["lease", "held"])
def test_silently_lost_connections_are_noticed_at_both_ends(tcp_pg_dsn: str, model: str) -> None:
    """A worker whose connections go silent (packets dropped, no reset) reconnects and goes on,
    and the server drops the dead sessions, releasing held-lock jobs' rows: the server's side
    gets the client's keepalive settings (without them it waits over two hours).  Over TCP on
    the loopback interface (a server of its own when the test server is on a unix socket)."""
    # CI sets SKIPLOCK_REQUIRE_IPTABLES: a missing iptables fails, and as root so does any
    # other reason; as a normal user the test skips once the program is found.
    machine.needs(
        "SKIPLOCK_REQUIRE_IPTABLES",
        programs=[("iptables", "iptables")],
        root_for="dropping packets with iptables",
    )
    reason = blackhole_available(tcp_pg_dsn)
    if reason is not None:
        machine.skip_or_fail(reason, "SKIPLOCK_REQUIRE_IPTABLES")
    result = run_quick(f"blackhole-{model}", tcp_pg_dsn)
    assert_sound(result)


@pytest.mark.skipif(find_pg_bindir() is None, reason="no initdb/pg_ctl for a scratch cluster")
def test_postgres_restarts_during_a_drain(pg_dsn: str) -> None:
    assert_sound(run_quick("restart", pg_dsn))


@pytest.mark.parametrize("model", ["lease", "held"])
def test_sigterm_with_jobs_in_flight(pg_dsn: str, model: str) -> None:
    result = run_quick(f"sigterm-{model}", pg_dsn)
    assert_sound(result)
    assert result.notes["given_back"] >= 1


def test_retries_stay_in_band_and_do_not_stampede(pg_dsn: str) -> None:
    result = run_quick("retries", pg_dsn)
    assert_sound(result)
    assert result.notes["herd_peak_planned_per_second"] <= result.notes["herd_size"] / 2


def test_ids_past_2_31(pg_dsn: str) -> None:
    assert_sound(run_quick("bigids", pg_dsn))


def test_shutdown_does_not_report_a_written_outcome_as_lost(
    app: App, db: psycopg.Connection[Any]
) -> None:
    """A completion is committed, but its reply is slow to come back (network latency: 0.5 s
    here) when the worker is told to stop.  The job is done by this worker's claim, so the
    worker must report it ``done``; the shutdown must not cancel the write in flight and then
    write the same batch again, which finds the job already done and reports ``lost`` (a
    WARNING line, ``stats.lost`` and the ``on_event`` hook all say the outcome did not count).
    Seen for real in the SIGTERM scenario: a graceful stop while the completer flushes."""

    @app.task(name="quick")
    async def quick() -> None:
        return None

    job_id = app.enqueue("quick", {}).id
    events: list[JobEvent] = []

    async def scenario() -> WorkerStats:
        worker = Worker(app, poll_interval=0.05, listen=False, on_event=events.append)
        committed = asyncio.Event()
        finish = worker.store.job_finish_many

        async def slow_reply(conn: Any, claims: Any, completion: str) -> set[int]:
            changed = await finish(conn, claims, completion)
            committed.set()
            await asyncio.sleep(0.5)  # the statement has committed; its reply is on the way
            return changed

        worker.store.job_finish_many = slow_reply  # type: ignore[method-assign]
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(committed.wait(), 30)
        worker.stop()
        return await asyncio.wait_for(running, 30)

    stats = asyncio.run(scenario())
    row = db.execute(
        sql.SQL("SELECT status, attempts FROM {} WHERE id = %s").format(
            sql.Identifier(app.schema, "jobs")
        ),
        (job_id,),
    ).fetchone()
    assert row == ("done", 1)  # the database has it right ...
    outcomes = [e.outcome for e in events if e.kind == "finished"]
    assert outcomes == ["done"], outcomes  # ... the worker must report it right too
    assert (stats.done, stats.lost) == (1, 0), stats
