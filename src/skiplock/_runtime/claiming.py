"""When a leasing worker claims, how many jobs, and how claimed jobs reach its slots.

A mixin of :class:`~skiplock.worker.Worker`.  The claim loop asks
:class:`~skiplock._runtime.capacity.Capacity` how many jobs to claim; one statement claims them
across
the worker's queues (a queue with a concurrency limit only for slots that can start now); the
jobs wait in ``_reserved``, leased, until a slot frees.  After a claim that came up short the
worker does not go back to the queues when a slot frees, only when new work is announced (a
NOTIFY, a promotion, a resumed queue) or at the next poll.

The claim loop runs one claim at a time, so it keeps one connection of the pool for its claims
instead of taking one per claim: taking and returning it cost an idle worker ~100 us between a
NOTIFY and the handler start.  A claim that fails gives it back (the pool replaces a broken one);
when the connection was lost, the claim runs once more at once, on a new one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from skiplock._db.queue_locks import QueueLockWaits
from skiplock._db.records import LimitedClaim
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.capacity import Capacity
from skiplock._runtime.claim_cursor import ClaimCursor
from skiplock._runtime.completer import Completer
from skiplock._runtime.maintenance import Maintenance
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.recycling import Recycling
from skiplock._runtime.running import RunningJob
from skiplock.errors import QueueLockBusy, SkiplockError
from skiplock.job import Job

log = logging.getLogger("skiplock.worker")

EMPTY_CLAIM_COOLDOWN = 0.005  # seconds; caps claims per idle worker at ~200/s under a NOTIFY flood


class Claiming:
    # Set by Worker.__init__ / Worker.run.
    concurrency: int
    capacity: Capacity
    claim_cursor: ClaimCursor
    burst: bool
    poll_interval: float
    lease_seconds: float
    worker_id: str
    store: AsyncStore
    settings: QueueSettings | None
    queue_lock_waits: QueueLockWaits
    maintenance: Maintenance | None
    recycling: Recycling
    _pool: AsyncConnectionPool | None
    _claim_conn: AsyncConnection[Any] | None
    _completer: Completer | None
    _wake: asyncio.Event | None
    _stopping: bool
    _held: bool
    _drained: bool
    _announced: int
    _refill_below: int
    _reserved: deque[RunningJob]
    _tasks: set[asyncio.Task[None]]
    # Why the last claim failed (None: it did not): a burst that ends on a failed claim did not
    # run what was due, and ``skiplock worker --burst`` exits 1.
    claim_error: str | None

    if TYPE_CHECKING:  # defined by Worker, JobOutcomes and the slots

        def _nudge(self) -> None: ...
        def _track(self, job: Job, model: Any) -> RunningJob: ...
        def _untrack(self, running: RunningJob) -> None: ...
        def _emit_started(self, job: Job) -> None: ...
        def _start_reserved(self) -> None: ...
        def _next_reserved(self) -> RunningJob | None: ...
        async def _claim_held(self, queues: list[str], limit: int) -> int: ...

    def _new_work(self) -> None:
        """Jobs may have become claimable (a NOTIFY, a promotion, a resumed queue)."""
        self._drained = False
        self._announced += 1
        self._nudge()

    def _work_behind_cursor(self) -> None:
        """Jobs may have become claimable with keys older than the claim cursor's (promoted,
        reclaimed, or in a resumed queue): a claim reads every queue from the start again."""
        self.claim_cursor.rescan()
        self._new_work()

    def _want(self) -> int:
        """How many jobs to claim now."""
        assert self._completer is not None
        unwritten = self._completer.pending
        if self._held:  # one transaction per slot; a finished job keeps its slot until written
            want = self.concurrency - len(self._tasks) - unwritten
        else:
            want = self.capacity.to_claim(len(self._tasks), len(self._reserved), unwritten)
        if self.recycling.enabled:  # no more than its share (--max-jobs), none once it is due
            left = self.recycling.claimable()
            if left is not None:
                return min(want, left)
        return want

    def _capacity_freed(self) -> None:
        """A job finished or its outcome was written: start what is reserved, claim if due."""
        if self._stopping:
            return
        self._start_reserved()
        self._claim_if_due()

    def _claim_if_due(self) -> None:
        """Wake the claim loop when the slots and reserved jobs ran low (not after a claim that
        came up short: then only announced work or the poll sends it back to the queues)."""
        claimed = len(self._tasks) + len(self._reserved)
        if not self._drained and (not self._reserved or claimed < self._refill_below):
            self._nudge()
        elif self.burst:
            self._nudge()  # the burst may be over

    async def _claim_loop(self, queues: list[str]) -> None:
        assert self._wake is not None and self._completer is not None
        assert self.settings is not None
        settings = self.settings
        idle_rounds = 0
        empty_claims = 0  # claims in a row that found nothing
        woken_by_news = False  # the wait below ended with an announcement of new work
        while not self._stopping:
            if not woken_by_news:
                await asyncio.sleep(0)  # let jobs that are about to finish free their slots first
            woken_by_news = False
            # Cleared every round: a wake-up that came while nothing could be claimed (all slots
            # busy, queues paused) must not make the wait below return at once, forever.
            self._wake.clear()
            want = self._want()
            self._refill_below = self.capacity.refill_below()
            active = [q for q in queues if q not in settings.paused]
            claimed = 0
            if want > 0 and active and not self._drained:
                announced = self._announced
                try:
                    claim = self._claim_held if self._held else self._claim_leased
                    claimed = await claim(active, want)
                    self.claim_error = None
                except (psycopg.Error, SkiplockError) as exc:
                    self.claim_error = str(exc).strip().splitlines()[0] or type(exc).__name__
                    again = "" if self.burst else ", retrying after the poll interval"
                    log.warning("claim failed%s: %s", again, exc)
                except (
                    Exception
                ) as exc:  # a bug, not a bad row (see claimed_rows): the worker lives
                    self.claim_error = f"{type(exc).__name__}: {exc}"
                    log.exception("claim failed unexpectedly")
                # Until new work is announced (or the poll interval passes), a slot that frees
                # does not send the worker back to an empty queue.  Not after an announcement
                # that came during the claim (its snapshot may have missed that job), nor when a
                # queue's concurrency limit, not an empty queue, made the claim come up short.
                limited = any(q in settings.limits for q in active)
                self._drained = claimed < want and announced == self._announced and not limited
                empty_claims = 0 if claimed else empty_claims + 1
            if claimed:
                idle_rounds = 0
                continue
            in_flight = self._tasks or self._reserved or self._completer.pending
            if self.recycling.reason is not None and not in_flight:
                return  # recycled: every job it claimed has run and been recorded
            if self.burst and not in_flight:
                # Nothing claimable, nothing running: run maintenance once more, then finish.
                idle_rounds += 1
                if idle_rounds > 1:
                    return
                assert self.maintenance is not None
                await self.maintenance.run_once(force=True)
                self._drained = False  # it may have promoted or enqueued jobs: look once more,
                self.claim_cursor.restart()  # from the start of every queue
                continue
            # Claims keep coming back empty: let wake-ups that arrive in the next moment collapse
            # into one, so a flood of NOTIFYs (anyone may send them) cannot drive claims.  The
            # first empty claim after work waits for nothing, so a new job starts at once.
            if empty_claims > 1:
                await asyncio.sleep(EMPTY_CLAIM_COOLDOWN)
            # Jittered, so that workers started together do not poll in step.  asyncio.timeout,
            # not wait_for: a wake-up resumes this loop directly, not through a task of its own.
            announced = self._announced
            try:
                async with asyncio.timeout(self.poll_interval * random.uniform(0.8, 1.2)):
                    await self._wake.wait()
            except TimeoutError:
                self._drained = False  # the poll: look again whatever was (not) announced
            # Told of new work (a NOTIFY), claim at once: a job is waiting, and this is its
            # latency.  The yield above only gathers slots that free together.
            woken_by_news = self._announced != announced

    async def _claim_leased(self, queues: list[str], limit: int) -> int:
        assert self._pool is not None
        jobs: list[Job] = []
        sent = time.monotonic()  # the leases run from the claim's commit, a little later
        for attempt in range(2):
            if self._claim_conn is None:
                self._claim_conn = await self._pool.getconn()
            conn = self._claim_conn
            try:
                jobs = await self._claim_on(conn, queues, limit)
                break
            except BaseException as exc:
                await self._release_claim_connection()
                # The kept connection may have died while idle (a server restart, an idle
                # timeout, a dropped TCP connection): claim once more, at once, on a new one.
                failed = isinstance(exc, psycopg.Error | SkiplockError)
                if attempt or not (failed and conn.broken):
                    raise
                log.info("the claim connection was lost (%s); claiming on a new one", exc)
        self.recycling.count_claimed(len(jobs))
        lease_until = sent + self.lease_seconds
        for job in jobs:
            running = self._track(job, "lease")
            running.lease_until = lease_until
            self._reserved.append(running)
        self._start_reserved()
        return len(jobs)

    async def _claim_on(
        self, conn: AsyncConnection[Any], queues: list[str], limit: int
    ) -> list[Job]:
        assert self.settings is not None
        limits = self.settings.limits
        unlimited = [q for q in queues if q not in limits]
        # A queue with a concurrency limit gets no more than the slots can start now: a job
        # waiting here would count against its limit while other workers' slots sit idle.
        limit_startable = min(limit, self.concurrency - len(self._tasks) - len(self._reserved))
        jobs: list[Job] = []
        if unlimited:
            after = self.claim_cursor.start()
            jobs = await self.store.job_claim(
                conn, unlimited, limit, self.worker_id, self.lease_seconds, after=after
            )
            self.claim_cursor.advance(jobs, limit)
        for queue in (q for q in queues if q in limits):
            if len(jobs) >= limit_startable:
                break
            try:
                claim = LimitedClaim(
                    queue,
                    limits[queue],
                    self.worker_id,
                    self.lease_seconds,
                    want=limit_startable - len(jobs),
                    lock_wait=self.queue_lock_waits.wait_for(queue),
                )
                jobs += await self.store.job_claim_limited(conn, claim)
            except QueueLockBusy as busy:  # that queue waits; the jobs claimed so far run
                self.queue_lock_waits.busy(busy)
            else:
                self.queue_lock_waits.free(queue)
        return jobs

    async def _release_claim_connection(self) -> None:
        """Give the claim connection back to the pool (after a failed claim, at shutdown)."""
        conn, self._claim_conn = self._claim_conn, None
        if conn is not None and self._pool is not None:
            await self._pool.putconn(conn)
