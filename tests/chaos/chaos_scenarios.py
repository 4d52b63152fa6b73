"""The fault-injection scenarios.  Each takes a DSN and ``full`` (full sizes, else the quick ones
CI runs) and returns a :class:`~chaos_harness.Result`: the checker's figures plus the outcome of
the scenario's own checks (``result.failures`` lists those that did not hold).

Sizes are in :data:`SIZES`; ``python tests/chaos/run.py --full`` runs them all at full size and
writes ``docs/reliability.md``.
"""

from __future__ import annotations

import itertools
import logging
import random
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import chaos_app
import psycopg
from chaos_harness import (
    Blackhole,
    ChaosRun,
    Fault,
    Result,
    blackhole_available,
    check,
    max_per_window,
    percentile,
    socket_owner,
    with_params,
)
from psycopg import sql

from helpers.polling import comes_true, wait_for
from helpers.scratch_pg import replicated_pair, scratch_cluster
from helpers.stores import SyncStore, sync_store
from skiplock._db.records import FailedAttempt, Snooze
from skiplock.job import Job

# quick (CI) and full sizes of every scenario
SIZES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "kill": (
        {
            "jobs": 1200,
            "workers": 3,
            "concurrency": 4,
            "lease": 2.0,
            "every": (0.6, 1.0),
            "spare_leader": True,
        },
        {
            "jobs": 5000,
            "workers": 3,
            "concurrency": 4,
            "lease": 2.0,
            "every": (2.0, 4.0),
            "spare_leader": False,
        },
    ),
    "kill-leader": ({"rounds": 1, "lease": 2.0}, {"rounds": 3, "lease": 2.0}),
    "stop": ({"rounds": 1, "jobs": 4, "lease": 1.0}, {"rounds": 5, "jobs": 8, "lease": 1.0}),
    "stop-long": (
        {"jobs": 4, "seconds": 10.0, "lease": 1.0},
        {"jobs": 8, "seconds": 30.0, "lease": 2.0},
    ),
    "terminate-held-long": ({"jobs": 4, "seconds": 10.0}, {"jobs": 8, "seconds": 30.0}),
    "race": ({"iterations": 200}, {"iterations": 2000}),
    "terminate": (
        {"jobs": 1500, "workers": 3, "concurrency": 4, "every": (0.5, 1.0)},
        {"jobs": 6000, "workers": 3, "concurrency": 4, "every": (1.0, 3.0)},
    ),
    "restart": (
        {"jobs": 1000, "restarts": 2, "every": (1.0, 2.0), "down": (0.2, 1.0), "rate": 40},
        {"jobs": 6000, "restarts": 6, "every": (2.0, 5.0), "down": (0.5, 3.0), "rate": 50},
    ),
    "sigterm": (
        {"rounds": 1, "short": 300, "long": 8, "concurrency": 8, "grace": 0.5},
        {"rounds": 3, "short": 1500, "long": 8, "concurrency": 8, "grace": 0.5},
    ),
    "blackhole": (
        # Quick: shorter TCP timeouts through the DSN (as a user may set them), ~3 s to notice;
        # full: skiplock's defaults.
        {
            "jobs": 1500,
            "faults": 1,
            "every": (1.0, 2.0),
            "timeouts": {
                "keepalives_idle": 1,
                "keepalives_interval": 1,
                "keepalives_count": 2,
                "tcp_user_timeout": 3000,
            },
        },
        {"jobs": 6000, "faults": 3, "every": (4.0, 8.0), "timeouts": {}},
    ),
    "retries": ({"flaky": 200, "herd": 1000}, {"flaky": 2000, "herd": 10000}),
    # run: seconds of drain before the primary stops; lag: for how long before that the
    # standby receives nothing (its replication connection's packets dropped); detect: seconds
    # until the standby is promoted (what an HA manager takes to decide, at its quickest).
    "failover": (
        {"jobs": 300, "rate": 40, "run": 1.5, "lag": 1.0, "detect": 1.0, "after": 1.5},
        {"jobs": 3000, "rate": 100, "run": 5.0, "lag": 3.0, "detect": 3.0, "after": 5.0},
    ),
    "bigids": ({"jobs": 100}, {"jobs": 2000}),
}


def sizes(name: str, full: bool) -> dict[str, Any]:
    return SIZES[name][1 if full else 0]


def durations(rng: random.Random, n: int, low: float = 5, high: float = 50) -> list[dict[str, Any]]:
    return [{"ms": round(rng.uniform(low, high), 1)} for _ in range(n)]


def _started(procs: list[Any]) -> list[Any]:
    return [p for p in procs if p.alive() and p.worker_id]


def _finish(run: ChaosRun, result: Result) -> None:
    """SIGTERM the workers still running: each must exit 0."""
    codes = run.stop_all()
    bad = {name: code for name, code in codes.items() if code != 0}
    result.expect(not bad, f"workers exit 0 on SIGTERM at the end (got {bad})")


def _common_expectations(result: Result) -> None:
    result.expect(result.lost == 0, f"lost == 0 (got {result.lost})")
    result.expect(result.stuck == 0, f"stuck == 0 (got {result.stuck})")
    result.expect(result.stale == 0, f"stale writes accepted == 0 (got {result.stale})")
    if result.duplicates is not None and result.bound is not None:
        result.expect(
            result.duplicates <= result.bound,
            f"duplicates ({result.duplicates}) within the bound ({result.bound})",
        )


# -- 1. kill -9 -------------------------------------------------------------------------------


def scenario_kill(dsn: str, full: bool, model: str = "lease") -> Result:
    """SIGKILL a random worker every few seconds during a drain, start a new one each time."""
    size = sizes("kill", full)
    rng = random.Random()
    started = time.time()
    run = ChaosRun(dsn, f"kill_{model}")
    try:
        ids = run.enqueue("work", durations(rng, size["jobs"]))
        options = {"concurrency": size["concurrency"], "lease": size["lease"], "model": model}
        procs = [run.start_worker(**options) for _ in range(size["workers"])]
        run.wait_started(procs)
        next_kill = time.monotonic() + rng.uniform(*size["every"])
        exits: list[str] = []

        def inject() -> None:
            nonlocal next_kill
            for p in procs:
                if not p.alive() and p.stopped_by is None:
                    exits.append(f"{p.name} exited by itself: {p.stderr[-500:]}")
                    p.stopped_by = "exited"
            if time.monotonic() < next_kill or run.counts().get("pending", 0) == 0:
                return
            candidates = _started(procs)
            if size["spare_leader"]:  # the kill-leader scenario covers that case
                candidates = [p for p in candidates if p.worker_id != run.leader()]
            if not candidates:
                return
            victim = rng.choice(candidates)
            run.kill(victim)
            procs.remove(victim)
            procs.append(run.start_worker(**options))
            next_kill = time.monotonic() + rng.uniform(*size["every"])

        run.wait_drained(300 if full else 120, watch=inject, step=0.05)
        result = Result.from_check(
            f"kill-{model}",
            f"kill -9 {model} workers during a drain",
            len(ids),
            f"{len(run.faults)} x SIGKILL",
            check(run, ids),
            run.faults,
        )
        result.expect(len(run.faults) >= 2, f"at least 2 kills (got {len(run.faults)})")
        result.expect(not exits, f"no worker exits by itself ({exits})")
        statuses = run.counts()
        result.expect(statuses == {"done": len(ids)}, f"every job done (got {statuses})")
        if model == "held":
            _expect_dead_attempts_counted(run, result)
        _common_expectations(result)
        _finish(run, result)
    finally:
        run.close()
    result.wall = time.time() - started
    return result


def _expect_dead_attempts_counted(run: ChaosRun, result: Result) -> None:
    """A held-lock run killed with its worker rolls back; the claim that finds the job again
    counts that attempt (held_starts), so no two runs of a job have the same attempt number."""
    attempts: dict[int, list[int]] = defaultdict(list)
    for e in run.ledger():
        attempts[e.job_id].append(e.attempt)
    repeated = sorted(j for j, seen in attempts.items() if len(seen) != len(set(seen)))
    rerun = sum(1 for seen in attempts.values() if len(seen) > 1)
    result.notes["jobs_run_again_as_their_next_attempt"] = rerun
    result.expect(
        not repeated, f"every dead attempt counted (jobs run twice as one attempt: {repeated})"
    )
    result.expect(rerun >= 1, f"some killed job ran again (got {rerun})")


def scenario_kill_leader(dsn: str, full: bool) -> Result:
    """SIGKILL the maintenance leader while it runs leased jobs, and time how long until they
    run again.  docs/worker.md promises "after at most --lease seconds plus the leader's
    reclaim interval"; the check allows that plus the poll interval plus 2 s of margin."""
    size = sizes("kill-leader", full)
    lease, poll = size["lease"], 0.2
    reclaim_interval = min(lease / 2, 5.0)
    promised = lease + reclaim_interval + poll
    started = time.time()
    run = ChaosRun(dsn, "kill_leader")
    try:
        all_ids: list[int] = []
        options = {"concurrency": 4, "lease": lease, "poll": poll}
        for round_no in range(size["rounds"]):
            queue = f"leader{round_no}"
            leader = run.start_worker(queues=queue, **options)
            run.wait_started([leader])
            wait_for(lambda leader=leader: run.leader() == leader.worker_id, 30, "a leader")
            other = run.start_worker(queues=queue, **options)
            run.wait_started([other])
            ids = run.enqueue("work", [{"ms": 1500}] * 8, queue=queue)
            all_ids += ids
            wait_for(
                lambda ids=ids, leader=leader: _running_by(run, ids).get(leader.worker_id, 0) >= 1,
                30,
                "the leader to run jobs",
            )
            run.kill(leader)
            run.wait_drained(60)
            other.signal(15)
            other.popen.wait(timeout=60)
        result = Result.from_check(
            "kill-leader",
            "kill -9 the maintenance leader (lease 2 s)",
            len(all_ids),
            f"{len(run.faults)} x SIGKILL of the leader",
            check(run, all_ids),
            run.faults,
        )
        result.notes["promised_seconds"] = round(promised, 2)
        _common_expectations(result)
        result.expect(bool(result.recovery), "the leader's jobs ran again")
        result.expect(
            max(result.recovery or [0]) <= promised + 2.0,
            f"the killed leader's jobs run again within --lease + reclaim interval + poll "
            f"(+ 2 s): {promised:.1f} s promised, slowest {max(result.recovery or [0]):.1f} s",
        )
        _finish(run, result)
    finally:
        run.close()
    result.wall = time.time() - started
    return result


# -- 2. SIGSTOP for 3x the lease --------------------------------------------------------------


def scenario_stop(dsn: str, full: bool) -> Result:
    """A worker frozen (SIGSTOP) for 3x its lease while running jobs: a leader reclaims them,
    a second worker runs them; on SIGCONT the frozen worker's heartbeat and outcomes are
    rejected (its log says ``outcome=lost``), and the rows show only the new owner's claim."""
    size = sizes("stop", full)
    lease: float = size["lease"]
    started = time.time()
    run = ChaosRun(dsn, "stop")
    overlaps: list[float] = []
    result: Result | None = None
    try:
        # The maintenance leader works for everyone but runs jobs of another queue only, so it
        # keeps reclaiming while the frozen worker (who would otherwise be leader) is stopped.
        leader = run.start_worker(concurrency=1, lease=lease, queues="idle")
        run.wait_started([leader])
        wait_for(lambda: run.leader() == leader.worker_id, 20, "the leader to lead")
        all_ids: list[int] = []
        frozen_ids: dict[int, str] = {}  # job id -> frozen worker id
        rejected: list[str] = []
        changed: list[int] = []  # rows some write changed after the frozen worker resumed
        for round_no in range(size["rounds"]):
            queue = f"stop{round_no}"
            a = run.start_worker(concurrency=size["jobs"], lease=lease, queues=queue)
            run.wait_started([a])
            ids = run.enqueue("work", [{"ms": 2000}] * size["jobs"], queue=queue)
            all_ids += ids
            wait_for(
                lambda ids=ids, a=a: _running_by(run, ids) == {a.worker_id: len(ids)},
                30,
                f"worker {a.name} to run all {len(ids)} jobs",
            )
            time.sleep(0.1)
            stopped_at = time.time()
            a.signal(19)  # SIGSTOP
            run.faults.append(Fault(stopped_at, "SIGSTOP", [a.pid], a.name, set(ids)))
            assert a.worker_id is not None
            frozen_ids.update(dict.fromkeys(ids, a.worker_id))
            c = run.start_worker(concurrency=size["jobs"], lease=lease, queues=queue)
            run.wait_started([c])
            # Frozen for 3x the lease, and at least until the new worker has done every job.
            wait_for(
                lambda ids=ids, c=c: (
                    _running_by(run, ids, reclaimed=True, done=True).get(c.worker_id) == len(ids)
                ),
                60,
                "the frozen worker's jobs to be reclaimed and done by another",
            )
            time.sleep(max(0.0, stopped_at + 3 * lease - time.time()))
            before = _row_versions(run, ids)
            a.signal(18)  # SIGCONT
            # Its handlers wake up and finish; every outcome it then writes is refused.
            wait_for(
                lambda ids=ids, a=a: len(a.finished()) >= len(ids) or not a.alive(),
                30,
                "the resumed worker to report its jobs",
            )
            time.sleep(2 * lease / 3)  # and a heartbeat or two
            after = _row_versions(run, ids)
            changed += [i for i in ids if before[i] != after[i]]
            outcomes = Counter(o for _, _, o in a.finished())
            rejected.append(f"{a.name}: {dict(outcomes)}")
            run.wait_drained(30)
            for proc in (a, c):
                proc.signal(15)
                proc.popen.wait(timeout=60)
        # Everything ran; the frozen claims left no trace in the rows.
        rows = run.jobs()
        runs = run.ledger()
        by_job: dict[int, list[Any]] = defaultdict(list)
        for e in runs:
            by_job[e.job_id].append(e)
        late_owner = [i for i, w in frozen_ids.items() if rows[i]["locked_by"] == w]
        for job_id, frozen in frozen_ids.items():
            mine = [e for e in by_job[job_id] if e.worker == frozen]
            others = [e for e in by_job[job_id] if e.worker != frozen]
            for x, y in itertools.product(mine, others):
                end_x = x.ended if x.ended is not None else time.time()
                end_y = y.ended if y.ended is not None else time.time()
                overlaps.append(max(0.0, min(end_x, end_y) - max(x.started, y.started)))
        result = Result.from_check(
            "stop",
            "SIGSTOP a worker for 3x the lease, then SIGCONT",
            len(all_ids),
            f"{len(run.faults)} x SIGSTOP ({len(frozen_ids)} jobs frozen)",
            check(run, all_ids),
            run.faults,
        )
        lost_lines = {
            (job_id, attempt) for p in run.workers for job_id, attempt, o in p.finished()
            if o == "lost"
        }  # fmt: skip
        # Measured on the rows themselves too: a write of the resumed worker that changed a row
        # would have given it a new row version (xmin).
        result.stale = (result.stale or 0) + len(set(late_owner) | set(changed))
        result.notes.update(
            frozen_outcomes=rejected,
            overlap_seconds_max=round(max(overlaps), 3) if overlaps else None,
            overlap_seconds_median=round(statistics.median(overlaps), 3) if overlaps else None,
        )
        result.expect(
            all((i, 1) in lost_lines for i in frozen_ids),
            "every frozen job's late outcome is logged outcome=lost",
        )
        result.expect(
            all(
                rows[i]["status"] == "done"
                and rows[i]["attempts"] == 2
                and rows[i]["locked_by"] != w
                and (rows[i]["last_error"] or "").startswith("lease expired")
                for i, w in frozen_ids.items()
            ),
            "rows show only the new owner (done, attempt 2, its worker, the reclaim's error)",
        )
        result.expect(
            any("lease lost" in p.stderr for p in run.workers),
            "the resumed worker's heartbeat is refused (logs 'lease lost')",
        )
        _common_expectations(result)
        result.expect(
            result.duplicates == len(frozen_ids),
            f"exactly one extra execution per frozen job (got {result.duplicates})",
        )
        _finish(run, result)
    finally:
        run.close()
    assert result is not None
    result.wall = time.time() - started
    return result


def _running_by(
    run: ChaosRun, ids: list[int], *, reclaimed: bool = False, done: bool = False
) -> dict[str, int]:
    """worker id -> how many of ``ids`` it is running (``done``: has done); with ``reclaimed``
    only claims made after a reclaim (attempt 2 or more) count."""
    where = "status = 'done'" if done else "status = 'running'"
    where += " AND attempts >= 2" if reclaimed else ""
    rows = run.db.execute(
        sql.SQL("SELECT locked_by, count(*) FROM {} WHERE id = ANY(%s) AND {} GROUP BY locked_by")
        .format(run.table("jobs"), sql.SQL(where)),
        (ids,),
    ).fetchall()  # fmt: skip
    return {r[0]: r[1] for r in rows}


def _row_versions(run: ChaosRun, ids: list[int]) -> dict[int, tuple[Any, ...]]:
    """Each row's version (xmin) and the columns an outcome or heartbeat writes."""
    rows = run.db.execute(
        sql.SQL(
            "SELECT id, xmin::text, status, attempts, locked_by, locked_until, last_error, "
            "run_at, finished_at, max_attempts FROM {} WHERE id = ANY(%s)"
        ).format(run.table("jobs")),
        (ids,),
    ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


# -- 2b. SIGSTOP while long jobs run -----------------------------------------------------------


def scenario_stop_long(dsn: str, full: bool) -> Result:
    """A worker frozen (SIGSTOP) while it runs long jobs, until another worker has reclaimed
    them and runs them; on SIGCONT its first heartbeat finds the leases reclaimed and it
    cancels its runs, instead of letting them run on to their end beside the new ones."""
    size = sizes("stop-long", full)
    lease: float = size["lease"]
    started = time.time()
    run = ChaosRun(dsn, "stop_long")
    result: Result | None = None
    try:
        a = run.start_worker(concurrency=size["jobs"], lease=lease, queues="long")
        ids = _start_long_jobs(run, a, size)
        a.signal(19)  # SIGSTOP
        fault = Fault(time.time(), "SIGSTOP", [a.pid], a.name, set(ids))
        run.faults.append(fault)
        b = run.start_worker(concurrency=size["jobs"], lease=lease, queues="long")
        run.wait_started([b])
        wait_for(
            lambda: _running_by(run, ids, reclaimed=True) == {b.worker_id: len(ids)},
            60,
            f"worker {b.name} to reclaim and run all {len(ids)} jobs",
        )
        resumed = time.time()
        a.signal(18)  # SIGCONT
        result = _long_runs_stopped(
            run, a, ids, size, "stop-long",
            "SIGSTOP a worker running long jobs until they run elsewhere, then SIGCONT",
            f"1 x SIGSTOP ({len(ids)} jobs of {size['seconds']:g} s frozen)",
            event="SIGCONT", at=resumed, note="stopped_after_sigcont_s", within=lease,
            again_by=b,
            logged="lease lost (reclaimed)",
        )  # fmt: skip
        result.notes["frozen_seconds"] = round(resumed - fault.at, 2)
        _finish(run, result)
    finally:
        run.close()
    assert result is not None
    result.wall = time.time() - started
    return result


def scenario_terminate_held_long(dsn: str, full: bool) -> Result:
    """A held-lock worker runs long jobs; the sessions that hold their transactions are
    terminated (as idle_in_transaction_session_timeout or an operator would end them), so the
    jobs are claimable again at once.  The worker stops its runs within a second or two,
    instead of letting them run on to their end beside the new ones."""
    size = sizes("terminate-held-long", full)
    started = time.time()
    run = ChaosRun(dsn, "term_held_long")
    result: Result | None = None
    try:
        a = run.start_worker(concurrency=size["jobs"], model="held", queues="long")
        ids = _start_long_jobs(run, a, size)
        b = run.start_worker(concurrency=size["jobs"], model="held", queues="long")
        run.wait_started([b])
        # The ledger shows worker a running every job: the sessions holding the jobs' held-lock
        # markers are a's (client ports would say so only over TCP).
        backends = sorted(set(run.held_job_sessions(ids).values()))
        at = time.time()
        for backend in backends:
            run.db.execute("SELECT pg_terminate_backend(%s)", (backend,))
        run.faults.append(Fault(at, "terminate held", [a.pid], a.name, set(ids)))
        result = _long_runs_stopped(
            run, a, ids, size, "terminate-held-long",
            "pg_terminate_backend on the sessions of long held-lock jobs",
            f"{len(backends)} x terminate (the transactions of {len(ids)} jobs of "
            f"{size['seconds']:g} s)",
            event="the termination", at=at, note="stopped_after_termination_s", within=3.0,
            again_by=None,
            logged="its held-lock session ended",
        )  # fmt: skip
        result.expect(
            len(backends) == len(ids),
            f"one session per running job terminated ({len(backends)} of {len(ids)})",
        )
        _finish(run, result)
    finally:
        run.close()
    assert result is not None
    result.wall = time.time() - started
    return result


def _start_long_jobs(run: ChaosRun, a: Any, size: dict[str, Any]) -> list[int]:
    """Enqueue the scenario's long jobs (each notes a cancellation) and wait until worker
    ``a`` runs them all."""
    run.wait_started([a])
    payload = {"ms": size["seconds"] * 1000, "note_stop": True}
    ids = run.enqueue("work", [payload] * size["jobs"], queue="long")
    wait_for(
        lambda: len({e.job_id for e in run.ledger() if e.pid == a.pid}) == len(ids),
        30,
        f"worker {a.name} to run all {len(ids)} jobs",
    )
    return ids


def _long_runs_stopped(
    run: ChaosRun,
    a: Any,
    ids: list[int],
    size: dict[str, Any],
    key: str,
    title: str,
    faults: str,
    *,
    event: str,
    at: float,
    note: str,
    within: float,
    again_by: Any,
    logged: str,
) -> Result:
    """Worker ``a`` lost the claims of the long jobs ``ids`` it runs (``event``, at ``at``): each
    of its runs must be cancelled within ``within`` seconds, none run to its end, each be logged
    `outcome=lost`; each job runs again to its end as attempt 2 (by ``again_by``, if given),
    and is done: exactly one extra execution per job."""

    def stopped() -> list[Any]:
        return [e for e in run.ledger() if e.pid == a.pid and e.stopped is not None]

    comes_true(lambda: len(stopped()) == len(ids), 30)
    run.wait_drained(size["seconds"] + 60)
    ledger = run.ledger()
    cut = {e.job_id: e for e in ledger if e.pid == a.pid and e.attempt == 1}
    again = {e.job_id: e for e in ledger if e.attempt == 2}
    if again_by is not None:
        again = {i: e for i, e in again.items() if e.pid == again_by.pid}
    after = sorted(round(e.stopped - at, 2) for e in stopped())
    both = sorted(
        round(cut[i].stopped - again[i].started, 2)  # type: ignore[operator]
        for i in ids
        if i in cut and i in again and cut[i].stopped is not None
    )
    result = Result.from_check(key, title, len(ids), faults, check(run, ids), run.faults)
    result.notes.update({note: after, "both_running_s": both})
    lost_logged = {(job_id, attempt) for job_id, attempt, o in a.finished() if o == "lost"}
    result.expect(
        all(i in cut and cut[i].stopped is not None and cut[i].ended is None for i in ids),
        f"each of {a.name}'s runs is cancelled, none runs to its end",
    )
    result.expect(
        bool(after) and max(after) < within,
        f"each is cancelled within {within:g} s of {event} ({after} s)",
    )
    result.expect(all((i, 1) in lost_logged for i in ids), f"{a.name} logs each outcome=lost")
    result.expect(logged in a.stderr, f"{a.name} logs '{logged} ... stopping it'")
    by = f"{again_by.name} runs" if again_by is not None else "each job runs again,"
    result.expect(
        all(i in again and again[i].ended is not None for i in ids),
        f"{by} each to its end, as attempt 2",
    )
    statuses = run.counts()
    result.expect(statuses == {"done": len(ids)}, f"every job done (got {statuses})")
    _common_expectations(result)
    result.expect(
        result.duplicates == len(ids),
        f"exactly one extra execution per job (got {result.duplicates})",
    )
    return result


# -- 3. late completion racing the reclaim ----------------------------------------------------

A_OPS = ("finish", "fail_retry", "fail_final", "snooze", "heartbeat", "release", "cancel")


@dataclass(frozen=True)
class Model:
    """The job row as the SQL statements change it (the columns the race can touch)."""

    status: str = "running"
    attempts: int = 1
    locked_by: str = "A"
    expired: bool = True
    max_attempts: int = 25
    error: str | None = None  # who wrote last_error: 'A', 'reclaim', 'cancel'

    def owned_by(self, worker: str, attempt: int) -> bool:
        return self.status == "running" and self.locked_by == worker and self.attempts == attempt


def model_step(m: Model, op: str, claims: dict[str, int]) -> tuple[Model, bool]:
    """Apply one operation; returns the new row and whether the statement changed it."""
    if op == "R":
        if m.status == "running" and m.expired:
            spent = m.attempts >= m.max_attempts
            return replace(m, status="failed" if spent else "pending", error="reclaim"), True
        return m, False
    if op == "Bc":
        if m.status == "pending":
            claims["B"] = m.attempts + 1
            return replace(m, status="running", attempts=m.attempts + 1, locked_by="B",
                           expired=False), True  # fmt: skip
        return m, False
    if op == "Bf":
        if "B" in claims and m.owned_by("B", claims["B"]):
            return replace(m, status="done"), True
        return m, False
    kind = op.split(":")[1]
    if not m.owned_by("A", 1):
        return m, False
    if kind == "finish":
        return replace(m, status="done"), True
    if kind == "fail_retry":
        final = m.attempts >= m.max_attempts
        return replace(m, status="failed" if final else "pending", error="A"), True
    if kind == "fail_final":
        return replace(m, status="failed", error="A"), True
    if kind == "snooze":
        return replace(m, status="pending", max_attempts=m.max_attempts + 1), True
    if kind == "heartbeat":
        return replace(m, expired=False), True
    if kind == "release":
        return replace(m, status="pending", attempts=m.attempts - 1), True
    if kind == "cancel":
        return replace(m, status="cancelled", error="cancel"), True
    raise ValueError(op)


def scenario_race(dsn: str, full: bool) -> Result:
    """In-process, at the SQL level: A claims a job with a lease that runs out at once; then a
    reclaim, B's claim, A's late write (finish, fail, snooze, heartbeat, release or cancel) and
    B's finish run in a random order, two of them at the same moment (threads) in most
    iterations.  A's write may only change the row while A's claim still owns the job: never
    after the reclaim (both changing the row = a stale write accepted).  Every final row must
    be what some serial order of the statements explains (the outcome each statement returned
    included), and after settling every job must end done, failed or cancelled."""
    iterations = sizes("race", full)["iterations"]
    started = time.time()
    rng = random.Random()
    run = ChaosRun(dsn, "race")
    store = sync_store(run.app)
    conns = {name: psycopg.connect(dsn, autocommit=True) for name in ("A", "R", "B", "S")}
    executor = ThreadPoolExecutor(2)
    stale = inconsistent = concurrent = 0
    outcomes: Counter[str] = Counter()
    lost: list[int] = []
    stuck: list[int] = []
    examples: list[str] = []
    table = run.table("jobs")
    try:
        for _ in range(iterations):
            job_id = run.app.enqueue("work", {}, queue="race").id
            claimed = store.job_claim(conns["A"], ["race"], 1, "A", 0.001)
            assert [j.id for j in claimed] == [job_id], claimed
            a_claim = claimed[0].claim
            time.sleep(0.003)  # A's lease has run out
            a_kind = rng.choice(A_OPS)
            ops = ["R", "Bc", f"A:{a_kind}", "Bf"]
            rng.shuffle(ops)
            if ops.index("Bf") < ops.index("Bc"):
                i, j = ops.index("Bf"), ops.index("Bc")
                ops[i], ops[j] = ops[j], ops[i]
            # Two neighbouring statements of different actors run at the same moment.
            pair: int | None = None
            if rng.random() < 0.75:
                choices = [k for k in range(3) if {ops[k][0], ops[k + 1][0]} != {"B"}]
                pair = rng.choice(choices) if choices else None
            b_claim: list[Job] = []
            observed: dict[str, bool] = {}

            def execute(
                op: str, job_id: int = job_id, a_claim: Any = a_claim, b_claim: list[Job] = b_claim
            ) -> bool:
                return _race_op(store, conns, op, job_id, a_claim, b_claim)

            k = 0
            while k < len(ops):
                if pair == k:
                    barrier = threading.Barrier(2)

                    def together(op: str, barrier: threading.Barrier = barrier) -> bool:
                        barrier.wait()
                        return execute(op)

                    first = executor.submit(together, ops[k])
                    second = executor.submit(together, ops[k + 1])
                    observed[ops[k]], observed[ops[k + 1]] = first.result(), second.result()
                    concurrent += 1
                    k += 2
                else:
                    observed[ops[k]] = execute(ops[k])
                    k += 1
            row = run.db.execute(
                sql.SQL(
                    "SELECT status, attempts, locked_by, max_attempts, last_error FROM {} "
                    "WHERE id = %s"
                ).format(table),
                (job_id,),
            ).fetchone()
            assert row is not None
            error = row[4]
            who = (
                None if error is None else "A" if error == "A-error"
                else "reclaim" if error.startswith("lease expired")
                else "cancel" if error == "cancelled while running" else error
            )  # fmt: skip
            actual = (row[0], row[1], row[2], row[3], who)
            # Serial orders allowed: the planned one, and the concurrent pair swapped.
            orders = [ops]
            if pair is not None:
                swapped = list(ops)
                swapped[pair], swapped[pair + 1] = swapped[pair + 1], swapped[pair]
                if swapped.index("Bc") < swapped.index("Bf"):
                    orders.append(swapped)
            explained = False
            for order in orders:
                m, claims, returns = Model(), {}, {}
                for op in order:
                    m, returns[op] = model_step(m, op, claims)
                if (
                    returns == observed
                    and (m.status, m.attempts, m.locked_by, m.max_attempts, m.error) == actual
                ):
                    explained = True
            a_op = f"A:{a_kind}"
            if observed["R"] and observed[a_op]:
                stale += 1
            if not explained:
                inconsistent += 1
                if len(examples) < 5:
                    examples.append(f"order={ops} pair={pair} observed={observed} row={actual}")
            outcomes[f"{a_kind}:{'accepted' if observed[a_op] else 'rejected'}"] += 1
            final = _settle(run, store, conns["S"], job_id)
            if final is None:
                lost.append(job_id)
            elif final not in ("done", "failed", "cancelled"):
                stuck.append(job_id)
        result = Result(
            "race",
            "late completion racing the reclaim (SQL level)",
            iterations,
            f"{iterations} random orderings ({concurrent} with two statements at once)",
            lost=len(lost),
            stuck=len(stuck),
            stale=stale,
        )
        result.notes.update(
            inconsistent_final_states=inconsistent,
            a_writes=dict(sorted(outcomes.items())),
            examples=examples,
        )
        result.expect(stale == 0, f"stale writes accepted == 0 (got {stale})")
        result.expect(inconsistent == 0, f"every final row explained by a serial order {examples}")
        result.expect(not lost and not stuck, f"every job settles (lost {lost}, stuck {stuck})")
    finally:
        executor.shutdown()
        for conn in conns.values():
            conn.close()
        run.close()
    result.wall = time.time() - started
    return result


def _race_op(
    store: SyncStore,
    conns: dict[str, psycopg.Connection[Any]],
    op: str,
    job_id: int,
    a_claim: Any,
    b_claim: list[Job],
) -> bool:
    """Run one statement of the race; whether it changed the job's row."""
    if op == "R":
        return job_id in store.job_reclaim_expired(conns["R"])
    if op == "Bc":
        b_claim[:] = store.job_claim(conns["B"], ["race"], 1, "B", 30)
        return bool(b_claim)
    if op == "Bf":
        if not b_claim:
            return False
        return job_id in store.job_finish_many(conns["B"], [b_claim[0].claim], "keep")
    kind = op.split(":")[1]
    c = conns["A"]
    if kind == "finish":
        return job_id in store.job_finish_many(c, [a_claim], "keep")
    if kind == "fail_retry":
        return job_id in store.job_fail_many(c, [FailedAttempt(a_claim, "A-error", 0.0)])
    if kind == "fail_final":
        return job_id in store.job_fail_many(c, [FailedAttempt(a_claim, "A-error", None)])
    if kind == "snooze":
        return job_id in store.job_snooze_many(c, [Snooze(a_claim, 0.0)])
    if kind == "heartbeat":
        return job_id in store.job_extend_leases(c, [a_claim], 30)
    if kind == "release":
        return job_id in store.job_release_many(c, [a_claim])
    return job_id in store.job_cancel_claimed_many(c, [a_claim])


def _settle(
    run: ChaosRun, store: SyncStore, conn: psycopg.Connection[Any], job_id: int
) -> str | None:
    """Drive a job to a final state: expire and reclaim a running one, run a pending one."""
    table = run.table("jobs")
    for _ in range(6):
        row = conn.execute(sql.SQL("SELECT status FROM {} WHERE id = %s").format(table),
                           (job_id,)).fetchone()  # fmt: skip
        if row is None or row[0] in ("done", "failed", "cancelled"):
            return None if row is None else str(row[0])
        if row[0] == "running":
            conn.execute(
                sql.SQL("UPDATE {} SET locked_until = now() - interval '1 s' WHERE id = %s")
                .format(table), (job_id,),
            )  # fmt: skip
            store.job_reclaim_expired(conn)
            continue
        if row[0] == "scheduled":
            conn.execute(sql.SQL("UPDATE {} SET run_at = now() WHERE id = %s").format(table),
                         (job_id,))  # fmt: skip
            store.job_promote_due(conn)
            continue
        for job in store.job_claim(conn, ["race"], 1, "S", 30):
            store.job_finish_many(conn, [job.claim], "keep")
    row = conn.execute(sql.SQL("SELECT status FROM {} WHERE id = %s").format(table),
                       (job_id,)).fetchone()  # fmt: skip
    return None if row is None else str(row[0])


# -- 4. pg_terminate_backend ------------------------------------------------------------------


def scenario_terminate(dsn: str, full: bool, model: str = "lease") -> Result:
    """Every 1-3 s, terminate one of this run's worker sessions (a pooled connection or a
    LISTEN connection) with pg_terminate_backend while the queue drains."""
    size = sizes("terminate", full)
    rng = random.Random()
    started = time.time()
    run = ChaosRun(dsn, f"term_{model}")
    try:
        ids = run.enqueue("work", durations(rng, size["jobs"]))
        options = {"concurrency": size["concurrency"], "lease": 2.0, "model": model}
        procs = [run.start_worker(**options) for _ in range(size["workers"])]
        run.wait_started(procs)
        wait_for(lambda: run.listening_workers() == len(procs), 20, "every worker to LISTEN")
        kinds: Counter[str] = Counter()
        next_fault = time.monotonic() + rng.uniform(*size["every"])

        def inject() -> None:
            nonlocal next_fault
            if time.monotonic() < next_fault or run.counts().get("pending", 0) == 0:
                return
            next_fault = time.monotonic() + rng.uniform(*size["every"])
            sessions = run.sessions()
            listeners = [s for s in sessions if s[2] == "listener"]
            pooled = [s for s in sessions if s[2] == "pool"]
            busy = [s for s in pooled if s[3] in ("active", "idle in transaction")]
            # A LISTEN session, a pooled one in use (a statement or a held job's transaction),
            # or any pooled one (most are idle: the worker finds out on its next use).
            pick = [0.0, 0.5][len(run.faults)] if len(run.faults) < 2 else rng.random()
            group = listeners if pick < 0.35 else busy if pick < 0.7 else pooled
            group = group or pooled or listeners
            if not group:
                return
            backend, port, kind, state = rng.choice(group)
            owners = socket_owner({port: backend} if port else {}, [p.pid for p in procs])
            at = time.time()
            done = run.db.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone()
            if done and done[0]:
                owner = owners.get(backend)
                run.faults.append(
                    Fault(at, f"terminate {kind}", [owner] if owner else [p.pid for p in procs],
                          f"backend {backend} ({state})")
                )  # fmt: skip
                kinds[kind] += 1

        run.wait_drained(300 if full else 120, watch=inject, step=0.05)
        alive = all(p.alive() for p in procs)
        listening = comes_true(lambda: run.listening_workers() == len(procs), 30)
        result = Result.from_check(
            f"terminate-{model}",
            f"pg_terminate_backend on {model} workers' sessions",
            len(ids),
            f"{len(run.faults)} x terminate ({kinds['pool']} pool, {kinds['listener']} LISTEN)",
            check(run, ids),
            run.faults,
        )
        reconnects = sum(p.stderr.count("listener connection lost") for p in procs)
        result.notes.update(listener_reconnects_logged=reconnects)
        result.expect(len(run.faults) >= 2, f"at least 2 sessions terminated ({len(run.faults)})")
        result.expect(alive, "no worker process exits")
        result.expect(listening, "every worker LISTENs again at the end")
        result.expect(
            reconnects >= kinds["listener"],
            f"each terminated listener reconnects ({reconnects} < {kinds['listener']})",
        )
        statuses = run.counts()
        result.expect(statuses == {"done": len(ids)}, f"every job done (got {statuses})")
        _common_expectations(result)
        _finish(run, result)
    finally:
        run.close()
    result.wall = time.time() - started
    return result


# -- 4b. silent connection loss --------------------------------------------------------------


def scenario_blackhole(dsn: str, full: bool, model: str = "lease") -> Result:
    """Now and then, drop every packet of all of one worker's connections (its pool and its
    LISTEN connection) for good, in both directions and without a reset, while the queue
    drains: the worker and the server each stop hearing from the other, as after a failover
    that moved the server's address or a NAT that forgot the connections.  The worker must
    notice (TCP keepalives and user timeout), reconnect and go on; the server must drop the
    sessions, rolling back what they held (a held-lock job's transaction)."""
    size = sizes("blackhole", full)
    rng = random.Random()
    started = time.time()
    timeouts = size["timeouts"]
    run = ChaosRun(with_params(dsn, **timeouts) if timeouts else dsn, f"hole_{model}")
    hole = Blackhole(run.tag)
    try:
        ids = run.enqueue("work", durations(rng, size["jobs"], 20, 80))
        procs = [run.start_worker(concurrency=4, lease=2.0, model=model) for _ in range(2)]
        run.wait_started(procs)
        wait_for(lambda: run.listening_workers() == len(procs), 20, "every worker to LISTEN")
        dropped: dict[int, int] = {}  # client port -> its backend's pid
        next_fault = time.monotonic() + rng.uniform(*size["every"])

        def inject() -> None:
            nonlocal next_fault
            if len(run.faults) >= size["faults"] or time.monotonic() < next_fault:
                return
            if run.counts().get("pending", 0) == 0:
                return
            proc = procs[len(run.faults) % len(procs)]
            sessions = [s for s in run.sessions() if s[1] and s[1] not in dropped]
            owners = socket_owner({s[1]: s[0] for s in sessions if s[1]}, [proc.pid])
            mine = [s for s in sessions if owners.get(s[0]) == proc.pid]
            if not any(kind == "listener" for _, _, kind, _ in mine):
                return  # its listener is reconnecting: next time
            for backend, port, _, _ in mine:
                assert port is not None
                hole.drop(port)
                dropped[port] = backend
            # The fault's time is when the last rule is in: the iptables calls take a while, and
            # a job the worker starts meanwhile (on a connection not yet silenced) is one the
            # fault interrupts too, which the bound counts only if it started before this.
            at = time.time()
            kinds = Counter(kind for _, _, kind, _ in mine)
            what = f"{proc.name}: {kinds['pool']} pooled + {kinds['listener']} LISTEN"
            fault = Fault(at, "blackhole", [proc.pid], what)
            fault.jobs = run.jobs_held_by(proc)
            run.faults.append(fault)
            next_fault = time.monotonic() + rng.uniform(*size["every"])

        run.wait_drained(300 if full else 120, watch=inject, step=0.05)
        alive = all(p.alive() for p in procs)

        def sessions_left() -> set[int]:
            rows = run.db.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (list(dropped.values()),)
            ).fetchall()
            return {r[0] for r in rows}

        # The server's side: keepalives and user timeout, then the session ends.
        server_dropped = comes_true(lambda: not sessions_left(), 60)
        listening = comes_true(lambda: run.listening_workers() == len(procs), 30)
        result = Result.from_check(
            f"blackhole-{model}",
            f"silent connection loss (packets dropped) of {model} workers",
            len(ids),
            f"{len(run.faults)} x all of a worker's connections",
            check(run, ids),
            run.faults,
        )
        reconnects = {p.name: p.stderr.count("listener connection lost") for p in procs}
        hit = [p for p in procs if any(p.pid in f.pids for f in run.faults)]
        ledger = run.ledger()
        # When each hit worker ran a job again that it claimed after the fault: past two
        # thirds of the lease, a job it had claimed before is no longer started (its heartbeats
        # fail), so a later start is a new claim, on a new connection.
        resumed: list[float | None] = []
        for f in run.faults:
            later = [e.started for e in ledger if e.pid in f.pids and e.started > f.at + 1.5]
            resumed.append(round(min(later) - f.at, 2) if later else None)
        result.notes.update(
            connections_dropped=len(dropped),
            hit_worker_claims_again_after_s=resumed,
            listener_reconnects_logged=reconnects,
            tcp_timeouts=timeouts or "skiplock's defaults",
        )
        result.expect(len(run.faults) == size["faults"], f"{size['faults']} fault(s) injected")
        result.expect(alive, "no worker process exits")
        result.expect(server_dropped, f"the server drops every dead session ({sessions_left()})")
        result.expect(listening, "every worker LISTENs again, on a new connection")
        result.expect(
            all(reconnects[p.name] >= 1 for p in hit),
            f"each hit worker's listener notices and reconnects ({reconnects})",
        )
        result.expect(None not in resumed, f"each hit worker runs jobs again ({resumed})")
        statuses = run.counts()
        result.expect(statuses == {"done": len(ids)}, f"every job done (got {statuses})")
        _common_expectations(result)
        _finish(run, result)
    finally:
        hole.close()
        run.close()
    result.wall = time.time() - started
    return result


# -- 5. PostgreSQL restarts -------------------------------------------------------------------


def scenario_restart(dsn: str, full: bool) -> Result:
    """On a scratch cluster of its own: ``pg_ctl stop -m fast|immediate``, a pause, ``start``,
    several times during a drain, with a producer enqueueing all along.  No worker exits, every
    worker LISTENs again, and every enqueue that returned is eventually done."""
    del dsn  # never the shared server
    size = sizes("restart", full)
    rng = random.Random()
    # The harness's own pool complains of every refused connection while the server is down.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    started = time.time()
    with scratch_cluster() as cluster:
        run = ChaosRun(cluster.dsn, "restart")
        acked: list[int] = []
        unsure = 0
        stop_producer = threading.Event()

        def produce() -> None:
            nonlocal unsure
            n = 0
            while not stop_producer.is_set():
                key = f"p{n}"
                payload = {"ms": round(rng.uniform(5, 50), 1)}
                for tries in itertools.count():
                    if stop_producer.is_set() and tries > 600:
                        break
                    try:
                        acked.append(run.app.enqueue("work", payload, idempotency_key=key).id)
                        break
                    except Exception:
                        unsure += tries == 0
                        time.sleep(0.1)
                n += 1
                time.sleep(1 / size["rate"])

        try:
            ids = run.enqueue("work", durations(rng, size["jobs"]))
            procs = [run.start_worker(concurrency=4, lease=2.0) for _ in range(2)]
            run.wait_started(procs)
            wait_for(lambda: run.listening_workers() == 2, 20, "both workers to LISTEN")
            producer = threading.Thread(target=produce, daemon=True)
            producer.start()
            modes = ["fast", "immediate"]
            for i in range(size["restarts"]):
                time.sleep(rng.uniform(*size["every"]))
                mode = modes[i % 2]
                at = time.time()
                cluster.stop(mode)
                time.sleep(rng.uniform(*size["down"]))
                cluster.start()
                run.faults.append(
                    Fault(at, f"restart -m {mode}", [p.pid for p in procs], up_at=time.time())
                )
                run.db.close()
                run.db = psycopg.connect(cluster.dsn, autocommit=True)
            time.sleep(1.0)
            stop_producer.set()
            producer.join(timeout=120)
            run.wait_drained(300 if full else 120)
            exited = [p.name for p in procs if not p.alive()]
            listening = comes_true(lambda: run.listening_workers() == 2, 30)
            every = set(ids) | set(acked)
            result = Result.from_check(
                "restart",
                "PostgreSQL restarted (fast / immediate) during a drain",
                len(every),
                f"{len(run.faults)} x restart",
                check(run, every, recovery_from="up"),
                run.faults,
            )
            result.notes.update(
                acknowledged_enqueues=len(acked),
                enqueues_that_saw_an_error=unsure,
                downtime_seconds=[round(f.up_at - f.at, 2) for f in run.faults if f.up_at],
            )
            result.expect(not exited, f"no worker exits ({exited})")
            result.expect(listening, "both workers LISTEN again after the last restart")
            not_done = [
                i for i, row in run.jobs().items() if i in every and row["status"] != "done"
            ]
            result.expect(not not_done, f"every acknowledged enqueue done ({not_done[:10]})")
            _common_expectations(result)
            _finish(run, result)
        finally:
            stop_producer.set()
            run.close()
    result.wall = time.time() - started
    return result


# -- 6. SIGTERM with jobs in flight -----------------------------------------------------------


def scenario_sigterm(dsn: str, full: bool, model: str = "lease") -> Result:
    """SIGTERM both workers while long jobs run (grace shorter than them): short jobs finish,
    long ones are given back (lease: released, logged ``outcome=release``; held: their
    transactions roll back); nothing is left running and the attempt is not spent: right after
    the shutdown the row is pending with attempts = that attempt - 1, and at the end every
    job's attempts = its executions that returned."""
    size = sizes("sigterm", full)
    rng = random.Random()
    started = time.time()
    run = ChaosRun(dsn, f"sigterm_{model}")
    try:
        long_ids = run.enqueue("work", [{"ms": 3000}] * size["long"], priority=-1,
                               max_attempts=1)  # fmt: skip
        ids = long_ids + run.enqueue("work", durations(rng, size["short"]))
        options = {
            "concurrency": size["concurrency"],
            "lease": 2.0,
            "grace": size["grace"],
            "model": model,
        }
        problems: list[str] = []
        shutdown_times: list[float] = []
        given_back = 0
        for _ in range(size["rounds"]):
            procs = [run.start_worker(**options) for _ in range(2)]
            run.wait_started(procs)
            pids = {p.pid for p in procs}
            wait_for(
                lambda pids=pids: _running_in_ledger(run, long_ids, pids) >= min(4, len(long_ids)),
                30,
                "long jobs to run",
            )
            time.sleep(0.3)
            at = time.time()
            for p in procs:
                p.signal(15)
            for p in procs:
                code = p.popen.wait(timeout=60)
                if code != 0:
                    problems.append(f"{p.name} exited {code}")
            shutdown_times.append(time.time() - at)
            run.faults.append(Fault(at, "SIGTERM", sorted(pids)))
            counts = run.counts()
            if counts.get("running"):
                problems.append(f"{counts['running']} jobs left running after SIGTERM")
            rows = run.jobs()
            cut = [e for e in run.ledger() if e.pid in pids and e.ended is None]
            given_back += len(cut)
            for e in cut:
                row = rows[e.job_id]
                if (row["status"], row["attempts"]) != ("pending", e.attempt - 1):
                    problems.append(
                        f"job {e.job_id} stopped at attempt {e.attempt}: now {row['status']} "
                        f"with attempts {row['attempts']}"
                    )
            logged = {(job_id, a) for p in procs for job_id, a, o in p.finished() if o == "release"}
            stopped = {(e.job_id, e.attempt) for e in cut}
            ran = {(e.job_id, e.attempt) for e in run.ledger() if e.pid in pids}
            # Besides the stopped jobs, a lease worker gives back the jobs it had claimed ahead
            # and not started: they must never have run, and their attempt is given back too.
            reserved = logged - stopped
            if model == "lease" and not stopped <= logged:
                problems.append(f"release log lines {sorted(logged)} miss stopped jobs {cut}")
            if model == "lease" and reserved & ran:
                problems.append(f"jobs that ran were logged released: {sorted(reserved & ran)}")
            for job_id, attempt in reserved:
                row = rows[job_id]
                if (row["status"], row["attempts"]) != ("pending", attempt - 1):
                    problems.append(
                        f"job {job_id} given back unstarted at attempt {attempt}: now "
                        f"{row['status']} with attempts {row['attempts']}"
                    )
        for _ in range(2):
            run.start_worker(**options)
        run.wait_drained(120)
        result = Result.from_check(
            f"sigterm-{model}",
            f"SIGTERM {model} workers with jobs in flight",
            len(ids),
            f"{size['rounds']} x SIGTERM of both workers",
            check(run, ids),
            run.faults,
        )
        returned = Counter(e.job_id for e in run.ledger() if e.ended is not None)
        rows = run.jobs()
        wrong = [
            i for i in ids if rows[i]["status"] == "done" and rows[i]["attempts"] != returned[i]
        ]  # fmt: skip
        result.notes.update(
            given_back=given_back,
            shutdown_seconds_max=round(max(shutdown_times), 2),
        )
        result.expect(not problems, f"clean shutdowns, nothing running, attempts given back: "
                      f"{problems[:5]}")  # fmt: skip
        result.expect(given_back >= 1, "some jobs were stopped and given back")
        result.expect(
            not wrong, f"attempts == executions that returned, for every job ({wrong[:10]})"
        )
        result.expect(
            max(shutdown_times) < size["grace"] + 15,
            f"shutdown within the grace (+ margin): {shutdown_times}",
        )
        statuses = run.counts()
        result.expect(statuses == {"done": len(ids)}, f"every job done (got {statuses})")
        _common_expectations(result)
        _finish(run, result)
    finally:
        run.close()
    result.wall = time.time() - started
    return result


def _running_in_ledger(run: ChaosRun, ids: list[int], pids: set[int]) -> int:
    """How many of ``ids`` the processes ``pids`` have started and not finished."""
    row = run.db.execute(
        sql.SQL(
            "SELECT count(*) FROM {} WHERE job_id = ANY(%s) AND pid = ANY(%s) AND ended IS NULL"
        ).format(run.table("ledger")),
        (ids, list(pids)),
    ).fetchone()
    return int(row[0]) if row else 0


# -- 7. retries -------------------------------------------------------------------------------


def scenario_retries(dsn: str, full: bool) -> Result:
    """(a) A handler failing with p = 0.3 and max_attempts 4: attempts never exceed the
    maximum, ``failed`` is final, no retry starts before its jitter band (how late they start,
    queueing behind the jobs due earlier, is reported).  (b) A herd: N jobs fail in one
    statement at the same instant, with the delays their task's policy draws; the retries
    spread out (the largest number in any one-second window is reported, for the planned
    run_at and for the actual starts)."""
    size = sizes("retries", full)
    rng = random.Random()
    started = time.time()
    run = ChaosRun(dsn, "retries")
    result: Result | None = None
    try:
        # (a) flaky handler
        flaky = run.enqueue(
            "flaky",
            [{"ms": round(rng.uniform(2, 20), 1), "fail": 0.3} for _ in range(size["flaky"])],
        )
        procs = [run.start_worker(concurrency=20, lease=5.0, queues="chaos") for _ in range(2)]
        run.wait_started(procs)
        run.wait_drained(300 if full else 120)
        poll = 0.2
        rows = run.jobs()
        runs = run.ledger()
        by_job: dict[int, list[Any]] = defaultdict(list)
        for e in runs:
            by_job[e.job_id].append(e)
        over_max = [i for i in flaky if rows[i]["attempts"] > rows[i]["max_attempts"]]
        bad_failed, early, lateness, after_final = [], [], [], []
        for i in flaky:
            execs = sorted(by_job[i], key=lambda e: e.started)
            if rows[i]["status"] == "failed":
                if rows[i]["attempts"] != chaos_app.FLAKY_MAX_ATTEMPTS or any(
                    e.outcome != "fail" for e in execs
                ):
                    bad_failed.append(i)
                if rows[i]["finished_at"] is not None and any(
                    e.started > rows[i]["finished_at"].timestamp() for e in execs
                ):
                    after_final.append(i)
            if len(execs) != rows[i]["attempts"]:
                after_final.append(i)
            for prev, nxt in itertools.pairwise(execs):
                if prev.ended is None:
                    continue
                gap = nxt.started - prev.ended
                nominal = chaos_app.FLAKY_RETRY.nominal(prev.attempt)
                low = nominal * (1 - chaos_app.FLAKY_RETRY.jitter)
                high = min(chaos_app.FLAKY_RETRY.cap, nominal * (1 + chaos_app.FLAKY_RETRY.jitter))
                if gap < low - 0.005:
                    early.append((i, prev.attempt, round(gap, 3), round(low, 3)))
                lateness.append(max(0.0, gap - high))
        run.stop_all()

        # (b) the herd
        herd = run.enqueue("herd", [{}] * size["herd"])
        store = sync_store(run.app)
        with psycopg.connect(run.dsn, autocommit=True) as conn:
            claimed: list[Job] = []
            while len(claimed) < len(herd):
                got = store.job_claim(conn, ["herd"], len(herd), "herd-claimer", 600)
                if not got:
                    break
                claimed += got
            policy = run.app.tasks["herd"].settings.retry
            failed_at = time.time()
            store.job_fail_many(
                conn,
                [
                    FailedAttempt(j.claim, "the herd fails at once", policy.delay(j.attempts))
                    for j in claimed
                ],
            )
            planned = [
                r[0]
                for r in conn.execute(
                    sql.SQL(
                        "SELECT extract(epoch FROM run_at)::float8 FROM {} WHERE queue = 'herd'"
                    ).format(run.table("jobs"))
                ).fetchall()
            ]  # fmt: skip
        procs = [
            run.start_worker(concurrency=20, lease=5.0, queues="herd", poll=poll) for _ in range(2)
        ]
        run.wait_drained(300 if full else 120)
        herd_set = set(herd)
        starts = [e.started for e in run.ledger() if e.job_id in herd_set]
        planned_peak = max_per_window(planned)
        actual_peak = max_per_window(starts)
        low_b = policy.nominal(1) * (1 - policy.jitter)
        high_b = policy.nominal(1) * (1 + policy.jitter)
        outside = [
            t - failed_at for t in planned if not low_b - 0.5 <= t - failed_at <= high_b + 0.5
        ]

        every = flaky + herd
        result = Result.from_check(
            "retries",
            "retries: p=0.3 failures, and a herd failing at once",
            len(every),
            f"{size['flaky']} flaky jobs (p=0.3, max 4 attempts); herd of {len(herd)}",
            check(run, every),
            run.faults,
        )
        final_failed = sum(1 for i in flaky if rows[i]["status"] == "failed")
        result.notes.update(
            flaky_failed_for_good=final_failed,
            retries=sum(1 for i in flaky for e in by_job[i] if e.attempt > 1),
            retry_lateness_p50=round(statistics.median(lateness), 3) if lateness else None,
            retry_lateness_p99=round(percentile(lateness, 99) or 0, 3),
            retry_lateness_max=round(max(lateness), 3) if lateness else None,
            herd_size=len(herd),
            herd_band_seconds=(round(low_b, 2), round(high_b, 2)),
            herd_peak_planned_per_second=planned_peak,
            herd_peak_started_per_second=actual_peak,
            early_retries=early[:5],
        )
        result.expect(not over_max, f"attempts never exceed max_attempts ({over_max[:5]})")
        result.expect(
            not bad_failed, f"failed only after max attempts, all failing ({bad_failed[:5]})"
        )
        result.expect(not after_final, f"no execution after the final one ({after_final[:5]})")
        result.expect(not early, f"no retry before its jitter band ({early[:5]})")
        # Late = waiting for a free slot behind the jobs due earlier, plus the polling: only
        # reported (it measures the backlog); a generous bound catches a retry that never came.
        result.expect(
            not lateness or max(lateness) < 30,
            f"retries start within 30 s after their band (max late {max(lateness or [0]):.2f} s)",
        )
        result.expect(len(claimed) == len(herd), "the whole herd failed in one statement")
        result.expect(not outside, f"herd retry times inside the band ({outside[:5]})")
        result.expect(
            planned_peak <= len(herd) / 2,
            f"the herd does not retry in lockstep ({planned_peak} of {len(herd)} in one second)",
        )
        _common_expectations(result)
        _finish(run, result)
    finally:
        run.close()
    assert result is not None
    result.wall = time.time() - started
    return result


# -- 8. ids past 2^31 -------------------------------------------------------------------------


def scenario_bigids(dsn: str, full: bool) -> Result:
    """Restart the jobs' identity at 2^31 (then at 2^53 + 1): enqueue, claim, finish, fail
    (retry and final), snooze, heartbeat, release, reclaim, retry, cancel, and real lease and
    held-lock workers draining jobs that fail now and then: every id round-trips exactly."""
    size = sizes("bigids", full)
    rng = random.Random()
    started = time.time()
    run = ChaosRun(dsn, "bigids")
    problems: list[str] = []
    try:
        store = sync_store(run.app)
        all_ids: list[int] = []
        for start_at in (2**31, 2**53 + 1):
            run.db.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN id RESTART WITH {}").format(
                    run.table("jobs"), sql.Literal(start_at)
                )
            )
            problems += _every_statement(run, store, start_at)
        run.db.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN id RESTART WITH {}").format(
                run.table("jobs"), sql.Literal(2**31 + 10_000)
            )
        )
        for model in ("lease", "held"):
            payloads = [
                {"ms": round(rng.uniform(1, 10), 1), "fail_until": int(rng.random() < 0.3)}
                for _ in range(size["jobs"])
            ]
            ids = run.enqueue("work", payloads, queue=f"big_{model}")
            if min(ids) <= 2**31:
                problems.append(f"ids not past 2^31: {min(ids)}")
            all_ids += ids
            procs = [
                run.start_worker(concurrency=8, model=model, queues=f"big_{model}")
                for _ in range(2)
            ]
            run.wait_started(procs)
            run.wait_drained(120)
            run.stop_all()
        logged = {job_id for _, job_id, _, _ in run.logged()}
        result = Result.from_check(
            "bigids",
            "ids past 2^31 (and 2^53)",
            len(all_ids),
            "identity restarted at 2^31 and 2^53 + 1",
            check(run, all_ids),
            run.faults,
        )
        result.expect(not problems, f"every statement handles big ids: {problems[:5]}")
        result.expect(set(all_ids) <= logged, "workers log the big ids exactly")
        statuses = {s: n for s, n in Counter(r["status"] for i, r in run.jobs().items()
                                             if i in set(all_ids)).items()}  # fmt: skip
        result.expect(statuses == {"done": len(all_ids)}, f"every job done ({statuses})")
        _common_expectations(result)
        result.duplicates = result.bound = None  # no faults here: nothing to bound
        result.notes["max_id"] = max(all_ids)
    finally:
        run.close()
    result.wall = time.time() - started
    return result


def _every_statement(run: ChaosRun, store: SyncStore, start_at: int) -> list[str]:
    """Each job statement once on ids starting at ``start_at``; the problems found."""
    problems: list[str] = []
    queue = f"q{start_at}"
    app = run.app
    ids = [e.id for e in app.enqueue_many("work", [{}] * 8, queue=queue)]
    if ids != list(range(start_at, start_at + 8)):
        problems.append(f"enqueue returned {ids}, expected {start_at}..")
    with psycopg.connect(run.dsn, autocommit=True) as conn:
        jobs = store.job_claim(conn, [queue], 8, "W", 30)
        if sorted(j.id for j in jobs) != ids:
            problems.append(f"claim returned {[j.id for j in jobs]}")
            return problems
        j = {job.id - start_at: job for job in jobs}
        expect: dict[int, str] = {}

        def want(ok: bool, what: str) -> None:
            if not ok:
                problems.append(f"{what} failed at id {start_at}")

        want(store.job_finish_many(conn, [j[0].claim], "keep") == {j[0].id}, "finish")
        expect[j[0].id] = "done"
        want(
            store.job_fail_many(conn, [FailedAttempt(j[1].claim, "e", 0.0)])
            == {j[1].id: "pending"},
            "fail",
        )
        expect[j[1].id] = "pending"
        final = FailedAttempt(j[2].claim, "e", None)
        want(store.job_fail_many(conn, [final]) == {j[2].id: "failed"}, "fail final")
        expect[j[2].id] = "failed"
        want(store.job_snooze_many(conn, [Snooze(j[3].claim, 0.0)]) == {j[3].id}, "snooze")
        expect[j[3].id] = "pending"
        want(store.job_extend_leases(conn, [j[4].claim], 30) == {j[4].id: False}, "heartbeat")
        expect[j[4].id] = "running"
        want(store.job_release_many(conn, [j[5].claim]) == {j[5].id}, "release")
        expect[j[5].id] = "pending"
        conn.execute(
            sql.SQL("UPDATE {} SET locked_until = now() - interval '1 s' WHERE id = %s").format(
                run.table("jobs")
            ),
            (j[6].id,),
        )
        want(store.job_reclaim_expired(conn) == {j[6].id: "pending"}, "reclaim")
        expect[j[6].id] = "pending"
        want(store.job_cancel_claimed_many(conn, [j[7].claim]) == {j[7].id}, "cancel running")
        expect[j[7].id] = "cancelled"
        want(app.retry_job(j[2].id), "retry of a failed job")
        expect[j[2].id] = "pending"
        want(app.cancel_job(j[1].id), "cancel of a pending job")
        expect[j[1].id] = "cancelled"
        for job_id, status in expect.items():
            got = app.get_job(job_id)
            if got is None or got.id != job_id or str(got.status) != status:
                problems.append(f"job {job_id}: {got and got.status} != {status}")
        # Leave nothing behind for the workers: finish what is open.
        store.job_finish_many(conn, [j[4].claim], "keep")
        for job in store.job_claim(conn, [queue], 8, "W2", 30):
            store.job_finish_many(conn, [job.claim], "keep")
    return problems


# -- 9. primary failover ----------------------------------------------------------------------

FAILOVER_TITLES = {
    "async": "primary failover, asynchronous replication",
    "on": "primary failover, synchronous_commit = on",
    "remote_apply": "primary failover, synchronous_commit = remote_apply",
}


def scenario_failover(dsn: str, full: bool, replication: str, model: str = "lease") -> Result:
    """A scratch primary and streaming standby (``replication``: ``async`` or the
    ``synchronous_commit`` level), 2 workers and a producer on a multi-host DSN
    (``target_session_attrs=read-write``); mid-drain the primary stops ``-m immediate`` and,
    ``detect`` seconds later, the standby is promoted.  The ledger lives on ``dsn``'s server,
    out of the failover's reach.  With synchronous replication every acknowledged enqueue and
    every reported outcome survives; asynchronously, what the standby had not received is gone
    (the loss is reported, bounded by the lag)."""
    size = sizes("failover", full)
    rng = random.Random()
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    started = time.time()
    key = "failover-" + replication.replace("_", "-") + ("-held" if model == "held" else "")
    with replicated_pair(replication) as pair:
        run = ChaosRun(pair.dsn, f"failover_{replication}", ledger_dsn=dsn)
        acked: list[int] = []
        acked_at: dict[int, float] = {}
        unsure = 0
        stop_producer = threading.Event()
        lag_reason = blackhole_available(pair.primary.dsn)
        blackhole = Blackhole(run.tag) if lag_reason is None else None

        def produce() -> None:
            nonlocal unsure
            n = 0
            while not stop_producer.is_set() or n == 0:
                payload = {"ms": round(rng.uniform(10, 60), 1)}
                for tries in itertools.count():
                    if tries > 600:
                        break
                    try:
                        job = run.app.enqueue("work", payload, idempotency_key=f"p{n}")
                        acked.append(job.id)
                        acked_at[job.id] = time.time()
                        break
                    except Exception:
                        unsure += tries == 0
                        time.sleep(0.1)
                n += 1
                time.sleep(1 / size["rate"])

        try:
            ids = run.enqueue("work", durations(rng, size["jobs"], 10, 60))
            procs = [run.start_worker(concurrency=4, lease=2.0, model=model) for _ in range(2)]
            run.wait_started(procs)
            wait_for(lambda: run.listening_workers() == 2, 20, "both workers to LISTEN")
            producer = threading.Thread(target=produce, daemon=True)
            producer.start()
            assert pair.standby is not None
            lag_at = None
            if blackhole is not None:
                # The standby falls behind: nothing reaches it from here to the failure (with
                # synchronous replication, commits wait meanwhile).
                time.sleep(max(0.0, size["run"] - size["lag"]))
                blackhole.drop(pair.replication_port())
                lag_at = time.time()
                time.sleep(size["lag"])
            else:
                time.sleep(size["run"])
            at = time.time()
            pair.primary.stop("immediate")
            time.sleep(size["detect"])
            pair.standby.promote()
            promoted = time.time()
            if blackhole is not None:
                # Only now: the dead primary's kernel still retransmits what its process had
                # sent, which would reach the standby before its promotion (a dead machine's
                # would not).
                blackhole.close()
            run.faults.append(
                Fault(at, "primary stop -m immediate", [p.pid for p in procs], up_at=promoted)
            )
            run.db.close()
            run.db = wait_for(lambda: _connect(pair.dsn), 30, "the promoted standby")
            time.sleep(size["after"])
            stop_producer.set()
            producer.join(timeout=120)
            drained = run.wait_drained(120 if full else 40)
            exited = [p.name for p in procs if not p.alive()]
            every = set(ids) | set(acked)
            found = check(run, every, recovery_from="up")
            result = Result.from_check(
                key,
                FAILOVER_TITLES[replication] + (", held-lock workers" if model == "held" else ""),
                len(every),
                "1 x primary stop -m immediate, standby promoted",
                found,
                run.faults,
            )
            # Outcomes a worker reported written before the failure whose job ran again after
            # it: commits the standby had not received (asynchronous replication only).  By
            # the log line's time: a forgotten claim's rerun has the same attempt number.
            reported = {
                (j, a) for p in procs for t, j, a, o in p.finished_at() if o == "done" and t < at
            }
            runs = run.ledger()
            rolled_back = {
                e.job_id
                for e in runs
                if e.outcome == "ok"
                and e.ended is not None
                and e.ended < at
                and (e.job_id, e.attempt) in reported
                and any(x.job_id == e.job_id and x.started > at for x in runs)
            }
            resumed = run.db.execute(
                sql.SQL(
                    "SELECT extract(epoch FROM min(locked_at))::float8 FROM {}"
                    " WHERE locked_at > to_timestamp(%s)"
                ).format(run.table("jobs")),
                (promoted,),
            ).fetchone()
            claims_at = resumed[0] if resumed else None
            # A lease claim commits without waiting for its WAL (docs/worker.md): one the
            # standby had not received is forgotten, and its job runs again with the same
            # attempt number; the first run's outcome is refused (late_writes_rejected).
            seen = Counter((e.job_id, e.attempt) for e in runs)
            result.notes.pop("unexplained_duplicates", None)
            lost_acked = set(acked) - set(run.jobs())
            # The loss is bounded by the lag: only enqueues acknowledged once the standby had
            # stopped receiving (or just before: WAL goes out after the local commit) are gone.
            early = [i for i in lost_acked if lag_at is None or acked_at[i] < lag_at - 0.2]
            result.notes.update(
                standby_lag_seconds=None if lag_at is None else round(at - lag_at, 2),
                forgotten_claims_run_again=len({j for (j, _), n in seen.items() if n > 1}),
                acknowledged_enqueues=len(acked),
                acknowledged_during_lag=sum(
                    1 for t in acked_at.values() if lag_at is not None and lag_at <= t <= at
                ),
                enqueues_that_saw_an_error=unsure,
                acknowledged_enqueues_lost=len(lost_acked),
                outcomes_rolled_back=len(rolled_back),
                failure_to_promoted_seconds=round(promoted - at, 2),
                failure_to_claims_resumed_seconds=None
                if claims_at is None
                else round(claims_at - at, 2),
                promoted_to_claims_resumed_seconds=None
                if claims_at is None
                else round(claims_at - promoted, 2),
            )
            result.expect(drained, "the queue drains after the failover")
            result.expect(not exited, f"no worker exits ({exited})")
            result.expect(claims_at is not None, "claims resume on the promoted standby")
            result.expect(result.stuck == 0, f"stuck == 0 (got {result.stuck})")
            if lag_reason is not None:
                result.notes["standby_lag"] = f"not simulated: {lag_reason}"
            if replication == "async":
                result.expect(not early, f"no enqueue lost from before the lag ({early[:10]})")
                # What was lost is what the standby had not received; the jobs that ran again
                # are the interrupted ones plus those whose outcome was lost with it.
                if result.bound is not None:
                    result.bound += len(rolled_back)
                result.expect(
                    (result.duplicates or 0) <= (result.bound or 0),
                    f"duplicates ({result.duplicates}) within the bound ({result.bound})",
                )
            else:
                result.expect(not rolled_back, f"no reported outcome rolled back ({rolled_back})")
                not_done = [
                    i for i, row in run.jobs().items() if i in every and row["status"] != "done"
                ]
                result.expect(not not_done, f"every acknowledged enqueue done ({not_done[:10]})")
                _common_expectations(result)
            _finish(run, result)
        finally:
            stop_producer.set()
            if blackhole is not None:
                blackhole.close()
            run.close()
    result.wall = time.time() - started
    return result


def _connect(dsn: str) -> psycopg.Connection[Any] | None:
    try:
        return psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError:
        return None


FAILOVER_SCENARIOS: dict[str, Callable[[str, bool], Result]] = {
    "failover-async": lambda dsn, full: scenario_failover(dsn, full, "async"),
    "failover-on": lambda dsn, full: scenario_failover(dsn, full, "on"),
    "failover-remote-apply": lambda dsn, full: scenario_failover(dsn, full, "remote_apply"),
    "failover-on-held": lambda dsn, full: scenario_failover(dsn, full, "on", "held"),
}
"""Run by ``python tests/chaos/run.py --failover`` (not part of ``--full``): their figures go
to their own section of docs/reliability.md."""


# -- all --------------------------------------------------------------------------------------

SCENARIOS: dict[str, Callable[[str, bool], Result]] = {
    "kill-lease": lambda dsn, full: scenario_kill(dsn, full, "lease"),
    "kill-held": lambda dsn, full: scenario_kill(dsn, full, "held"),
    "kill-leader": scenario_kill_leader,
    "stop": scenario_stop,
    "stop-long": scenario_stop_long,
    "race": scenario_race,
    "terminate-lease": lambda dsn, full: scenario_terminate(dsn, full, "lease"),
    "terminate-held": lambda dsn, full: scenario_terminate(dsn, full, "held"),
    "terminate-held-long": scenario_terminate_held_long,
    "blackhole-lease": lambda dsn, full: scenario_blackhole(dsn, full, "lease"),
    "blackhole-held": lambda dsn, full: scenario_blackhole(dsn, full, "held"),
    "restart": scenario_restart,
    "sigterm-lease": lambda dsn, full: scenario_sigterm(dsn, full, "lease"),
    "sigterm-held": lambda dsn, full: scenario_sigterm(dsn, full, "held"),
    "retries": scenario_retries,
    "bigids": scenario_bigids,
}
