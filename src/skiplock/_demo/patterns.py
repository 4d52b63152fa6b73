"""Part 1 of ``skiplock demo``: the three dequeue patterns (docs/demo.md), side by side.

Each run puts the same number of jobs into a queue of its own and lets 1, 2, 4 ... worker
threads drain it, each thread on its own connection, each claim followed by a little work
(:data:`WORK_SECONDS`) before the job is marked done:

* ``naive``: read the head job, then mark it running in a second statement.  Two workers can
  read the same job before either marks it: both run it (counted from the ``attempts`` column).
* ``for_update``: claim the head row with ``FOR UPDATE`` and hold the lock while working.
  Correct, but every worker queues behind the same head row.
* ``skip_locked``: the same with ``FOR UPDATE SKIP LOCKED``: each worker takes the first row
  nobody holds, so workers never wait and throughput grows with them.

The connections commit without waiting for the WAL flush (``synchronous_commit = off``), so
that the numbers show locking rather than the speed of the disk.  Lock waits are sampled from
``pg_stat_activity`` every few milliseconds: backends of the run waiting for a row lock
(``wait_event`` ``transactionid`` or ``tuple``).  ``wait_seconds`` sums waiting backends times
the sampling interval: roughly the worker-seconds spent blocked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import Connection

from skiplock._db.connections import connect_kwargs
from skiplock._db.demo import DemoStatements
from skiplock._db.sql import Queries

PATTERNS = ("naive", "for_update", "skip_locked")
LABELS = {
    "naive": "naive select-then-update",
    "for_update": "FOR UPDATE",
    "skip_locked": "FOR UPDATE SKIP LOCKED",
}
SHORT_LABELS = {"naive": "naive", "for_update": "FOR UPDATE", "skip_locked": "SKIP LOCKED"}
WORK_SECONDS = 0.002  # the "work" each claim does while it holds the job
SAMPLE_SECONDS = 0.004


@dataclass
class PatternResult:
    pattern: str
    workers: int
    jobs: int
    claims: int
    duplicates: int
    seconds: float
    wait_seconds: float
    claim_seconds: float  # time spent in the claim statements, all workers together
    unfinished: int = 0

    @property
    def claims_per_s(self) -> float:
        return self.claims / self.seconds if self.seconds > 0 else 0.0

    @property
    def claim_ms(self) -> float:
        return 1000 * self.claim_seconds / self.claims if self.claims else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "workers": self.workers,
            "jobs": self.jobs,
            "claims": self.claims,
            "claims_per_s": round(self.claims_per_s, 1),
            "duplicates": self.duplicates,
            "wait_seconds": round(self.wait_seconds, 4),
            "claim_ms": round(self.claim_ms, 3),
            "seconds": round(self.seconds, 4),
            "unfinished": self.unfinished,
        }


def worker_counts(max_workers: int) -> list[int]:
    """1, 2, 4 ... up to ``max_workers`` (which is included even when not a power of two)."""
    counts = []
    n = 1
    while n < max_workers:
        counts.append(n)
        n *= 2
    return [*counts, max_workers]


@dataclass
class _Tally:
    claims: int = 0
    claim_seconds: float = 0.0
    error: BaseException | None = None


@dataclass
class PatternBench:
    """The connections of part 1 (one per worker, plus one to sample lock waits)."""

    dsn: str
    queries: Queries
    max_workers: int
    demo: DemoStatements = field(init=False)
    conns: list[Connection[Any]] = field(default_factory=list)
    sampler: Connection[Any] | None = None

    def __post_init__(self) -> None:
        self.demo = DemoStatements(self.queries)

    def __enter__(self) -> PatternBench:
        kwargs = {**connect_kwargs(self.dsn), "application_name": "skiplock demo"}
        try:
            self.sampler = Connection.connect(self.dsn, **kwargs)
            for _ in range(self.max_workers):
                self.conns.append(Connection.connect(self.dsn, **kwargs))
            for conn in [self.sampler, *self.conns]:
                self.demo.demo_session_setup(conn)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in [*self.conns, *([self.sampler] if self.sampler else [])]:
            conn.close()
        self.conns.clear()
        self.sampler = None

    def warm_up(self) -> None:
        """One small run of each pattern on every connection (the first statements of a
        fresh connection are slow: catalog caches, plans), not reported."""
        for pattern in PATTERNS:
            self.run(pattern, len(self.conns), 2 * len(self.conns), run="warmup")

    def run(
        self,
        pattern: str,
        workers: int,
        jobs: int,
        on_progress: Callable[[int], None] = lambda done: None,
        *,
        run: str = "dequeue",
    ) -> PatternResult:
        """Drain ``jobs`` fresh jobs with ``workers`` threads using ``pattern``."""
        assert self.sampler is not None and workers <= len(self.conns)
        demo, queue = self.demo, f"{run}-{pattern.replace('_', '-')}-w{workers}"
        demo.demo_pattern_jobs_insert(self.sampler, queue, jobs)
        conns = self.conns[:workers]
        pids = [c.info.backend_pid for c in conns]
        tallies = [_Tally() for _ in conns]
        stop = threading.Event()
        start = threading.Barrier(workers + 1)
        threads = [
            threading.Thread(
                target=_drain,
                args=(pattern, conn, demo, queue, f"w{i}", start, stop, tally),
                name=f"skiplock-demo-{pattern}-{i}",
                daemon=True,
            )
            for i, (conn, tally) in enumerate(zip(conns, tallies, strict=True))
        ]
        for thread in threads:
            thread.start()
        try:
            start.wait()
            began = last = time.perf_counter()
            waited = 0.0
            while any(t.is_alive() for t in threads):
                waiting = demo.demo_lock_waits(self.sampler, pids)
                now = time.perf_counter()
                waited += waiting * (now - last)
                last = now
                on_progress(sum(t.claims for t in tallies))
                time.sleep(SAMPLE_SECONDS)
        except BaseException:  # Ctrl-C: let the workers finish their claim before closing
            stop.set()
            start.abort()
            for thread in threads:
                thread.join(timeout=5)
            raise
        elapsed = time.perf_counter() - began
        for thread in threads:
            thread.join()
        for tally in tallies:
            if tally.error is not None:
                raise tally.error
        total_jobs, claims, duplicates, unfinished = demo.demo_pattern_tally(self.sampler, queue)
        return PatternResult(
            pattern=pattern,
            workers=workers,
            jobs=total_jobs,
            claims=claims,
            duplicates=duplicates,
            seconds=elapsed,
            wait_seconds=waited,
            claim_seconds=sum(t.claim_seconds for t in tallies),
            unfinished=unfinished,
        )


def _drain(
    pattern: str,
    conn: Connection[Any],
    demo: DemoStatements,
    queue: str,
    worker: str,
    start: threading.Barrier,
    stop: threading.Event,
    tally: _Tally,
) -> None:
    try:
        start.wait()
        if pattern == "naive":
            _drain_naive(conn, demo, queue, worker, stop, tally)
        else:
            claim = demo.demo_claim_wait if pattern == "for_update" else demo.demo_claim_skip
            while not stop.is_set():
                with conn.transaction():
                    began = time.perf_counter()
                    job_id = claim(conn, queue, worker)
                    tally.claim_seconds += time.perf_counter() - began
                    if job_id is None:
                        return
                    time.sleep(WORK_SECONDS)  # the work, done while holding the row lock
                    demo.demo_job_done(conn, job_id)
                tally.claims += 1
    except (psycopg.Error, threading.BrokenBarrierError) as exc:
        tally.error = exc


def _drain_naive(
    conn: Connection[Any],
    demo: DemoStatements,
    queue: str,
    worker: str,
    stop: threading.Event,
    tally: _Tally,
) -> None:
    while not stop.is_set():
        began = time.perf_counter()
        job_id = demo.demo_naive_peek(conn, queue)
        if job_id is None:
            return
        # Between these two statements another worker may read the same job.
        demo.demo_naive_claim(conn, job_id, worker)
        tally.claim_seconds += time.perf_counter() - began
        tally.claims += 1
        time.sleep(WORK_SECONDS)
        demo.demo_job_done(conn, job_id)
