"""Held-lock slots: each claims one job in its own transaction, which keeps the row locked
while the task runs and commits the outcome with it.

A crash rolls the transaction back, so the job is claimable again at once; the next claim finds
the start recorded apart (``held_starts``, migration 0005), counts the dead attempt and runs the
job as the attempt after it, or fails it when that was the last (see
:func:`~skiplock._runtime.execution.dead_starts`).  A transaction that rolls back while the
worker lives gets its attempt counted at once, with a backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from skiplock._db.held_async import roll_back_quietly
from skiplock._db.queue_locks import QueueLockWaits
from skiplock._db.records import LimitedClaim
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.completer import Recorded
from skiplock._runtime.execution import Outcome, dead_starts, rolled_back
from skiplock._runtime.job_outcomes import OutcomeReporter
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.queue_turns import QueueTurns
from skiplock._runtime.recycling import Recycling
from skiplock._runtime.running import RunningJob
from skiplock._runtime.worker_state import WorkerState
from skiplock._task_settings import WorkerModel
from skiplock.app import App
from skiplock.errors import QueueLockBusy, SkiplockError
from skiplock.job import Job

log = logging.getLogger("skiplock.worker")

# Seconds a held-lock worker's slots skip the claim of limited keys after one that brought no
# job (no limited key had a pending job in their queues, or each was at its limits): that claim
# takes a pooled connection and a transaction of its own, which a claim per slot would pay at
# every job while limited keys have nothing to start (docs/design.md, "Limits per key in
# held-lock workers").
KEY_CLAIM_PAUSE = 0.1


def claims_held(app: App, model: WorkerModel | None, queues: list[str]) -> bool:
    """Whether a worker of ``model`` (None: each task's own) on ``queues`` claims held-lock."""
    if model is not None:
        return model == "held"
    return any(t.settings.model == "held" for t in app.tasks.values() if t.queue in queues)


class HeldSlots:
    """The held-lock implementation of :class:`~skiplock._runtime.slots.Slots`."""

    def __init__(
        self,
        app: App,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        state: WorkerState,
        reporter: OutcomeReporter,
        settings: QueueSettings,
        queue_lock_waits: QueueLockWaits,
        recycling: Recycling,
        *,
        concurrency: int,
        model: WorkerModel | None,
        worker_id: str,
        lease_seconds: float,
        on_freed: Callable[[], None],
        weights: Mapping[str, int] | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.pool = pool
        self.state = state
        self.reporter = reporter
        self.completer = reporter.completer
        self.settings = settings
        self.queue_lock_waits = queue_lock_waits
        # The queues take turns at the first job of a claim, each as often as its weight.
        self.turns = QueueTurns(weights)
        self.recycling = recycling
        self.concurrency = concurrency
        self.model = model
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.on_freed = on_freed  # a slot's job ended: claim if due
        self.after_key: str | None = None  # where the next claim of limited keys goes on
        # The same, for the limited keys' jobs of each queue with limits of its own.
        self.queue_after_key: dict[str, str | None] = {}
        self.keys_at = 0.0  # the claim of limited keys waits until then (KEY_CLAIM_PAUSE)

    def room(self, unwritten: int) -> int:
        # One transaction per slot; a finished job keeps its slot until written.
        return self.concurrency - len(self.state.busy) - unwritten

    def start_waiting(self) -> None:
        pass  # no job waits for a slot: each slot claims its own

    def give_back_waiting(self) -> None:
        pass

    def let_go_idle(self) -> list[asyncio.Task[None]]:
        return []  # a slot ends with its job

    async def close(self) -> None:
        pass  # each slot returns its connection when its job ends

    def _slot_freed(self, task: asyncio.Task[None]) -> None:
        self.state.busy.discard(task)
        self.on_freed()

    def _model_of(self, job: Job) -> WorkerModel:
        if self.model is not None:
            return self.model
        task = self.app.tasks.get(job.task)
        return (task.settings.model if task else None) or "lease"

    async def claim(self, queues: list[str], limit: int) -> int:
        """Start up to ``limit`` slots, each claiming one job in its own transaction."""
        claimed = 0
        for _ in range(limit):
            got: asyncio.Future[Job | None] = asyncio.get_running_loop().create_future()
            slot: asyncio.Task[None] = asyncio.create_task(self._held_slot(queues, got))
            self.state.busy.add(slot)
            try:
                job = await got
            except BaseException:
                job = None
                raise
            finally:
                if job is None:  # an empty claim: let its transaction end before counting slots
                    await asyncio.gather(slot, return_exceptions=True)
                    self.state.busy.discard(slot)
            if job is None:
                break
            slot.add_done_callback(self._slot_freed)
            claimed += 1
            self.recycling.count_claimed(1)
        return claimed

    async def _held_slot(self, queues: list[str], got: asyncio.Future[Job | None]) -> None:
        running: RunningJob | None = None
        try:
            async with self.pool.connection() as conn:
                job = await self._claim_for_slot(conn, queues)
                if job is None:  # the store ended the transaction
                    got.set_result(None)
                    return
                try:
                    got.set_result(job)
                    if self._model_of(job) == "held":
                        earlier, cancel_requested = await self._record_held_start(job)
                        if earlier:
                            counted = await self._count_dead_starts(job, earlier, conn)
                            if counted is None:
                                return  # its attempts are spent: failed, not run
                            job = counted
                        running = self.reporter.track(job, "held")
                        running.conn = conn
                        if cancel_requested:  # by an admin, since the job's last outcome
                            running.cancel_requested()  # not started: no task to cancel
                        else:
                            running.task = asyncio.current_task()
                            self.reporter.started(job)
                        await self._run_held(running, conn)
                        return
                    await conn.commit()  # a lease task: its claim commits, with its lease
                except BaseException as exc:
                    await roll_back_quietly(conn)  # and report what failed, not the rollback
                    if running is not None and isinstance(exc, asyncio.CancelledError):
                        await self._forget_held_start(running.job)
                    raise
            # A lease task claimed by a held-capable worker.
            running = self.reporter.track(job, "lease")
            self.reporter.started(job)
            running.task = asyncio.current_task()
            await self.reporter.run_leased(running)
        except Exception as exc:
            if not got.done():
                got.set_exception(exc)
            elif running is not None and running.model == "held":
                await self._spend_rolled_back_attempt(running.job, exc)
            else:  # the claim's transaction failed after the claim: the job is pending again
                log.warning("a held-lock claim's transaction failed and rolled back: %s", exc)
        finally:
            if running is not None and running.model == "held":
                self.state.untrack(running)

    async def _claim_for_slot(self, conn: AsyncConnection[Any], queues: list[str]) -> Job | None:
        """A job for a held-lock slot, its transaction open on ``conn``: while some key has
        limits, a job of a limited key first (within its limits); then from the queues without
        a limit, else from each limited queue in turn.  The claims of limited keys and queues
        are serialised by a transaction on another connection of the pool (see
        ``job_claim_held_key_limited`` and ``job_claim_held_limited``)."""
        limits = self.settings.limits
        unlimited = self.turns.next([q for q in queues if q not in limits])
        job = None
        if unlimited and self.settings.keys_limited and time.monotonic() >= self.keys_at:
            async with self.pool.connection() as guard:
                job, self.after_key = await self.store.job_claim_held_key_limited(
                    conn, guard, unlimited, self.worker_id, self.lease_seconds, self.after_key
                )
            if job is None:
                self.keys_at = time.monotonic() + KEY_CLAIM_PAUSE
        if job is None:
            job = await self.store.job_claim_held(
                conn, unlimited, self.worker_id, self.lease_seconds
            )
        for queue in (q for q in queues if q in limits):
            if job is not None:
                break
            try:
                async with self.pool.connection() as guard:
                    claim = LimitedClaim(
                        queue,
                        limits[queue],
                        self.worker_id,
                        self.lease_seconds,
                        lock_wait=self.queue_lock_waits.wait_for(queue),
                        keys_limited=self.settings.keys_limited,
                        after_key=self.queue_after_key.get(queue),
                    )
                    job, after = await self.store.job_claim_held_limited_with_keys(
                        conn, guard, claim
                    )
                    self.queue_after_key[queue] = after
            except QueueLockBusy as busy:  # that queue waits; the others are claimed from
                self.queue_lock_waits.busy(busy)
            else:
                self.queue_lock_waits.free(queue)
        return job

    async def _record_held_start(self, job: Job) -> tuple[int, bool]:
        """Record this start of a held-lock job, committed on another connection.  Returns how
        many starts before it, from the same state of the job's row, died without an outcome
        (0 normally), and whether an admin asked to cancel the job in that state (a request
        that came before the start, see :mod:`skiplock._runtime.held_cancels`).  Best effort: if the
        record cannot be written, the job runs anyway."""
        try:
            async with self.pool.connection() as conn:
                starts, cancel_requested = await self.store.job_held_start_count(conn, job.id)
                return starts - 1, cancel_requested
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("job %s: could not record its held-lock start (%s)", job.id, exc)
            return 0, False

    async def _forget_held_start(self, job: Job) -> None:
        """The job was stopped (shutdown) and rolled back on purpose: its next start must not
        take this one for a start whose worker died."""
        try:
            async with self.pool.connection() as conn:
                await self.store.job_held_start_forget(conn, job.id)
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("job %s: could not forget its stopped held-lock start: %s", job.id, exc)

    async def _count_dead_starts(
        self, job: Job, earlier: int, conn: AsyncConnection[Any]
    ) -> Job | None:
        """The last ``earlier`` starts of this held-lock job died with their worker: count them
        as attempts in this claim's transaction.  Returns the job to run now, as the attempt
        after them; or None when they used up its attempts, after failing it (committed)."""
        dead = dead_starts(job, earlier)
        if not await self.store.job_count_dead_attempts(
            conn, job.claim, dead.attempts, dead.error
        ):  # (cannot happen while this transaction holds the row: run it uncounted)
            log.warning("job %s: could not count its dead attempts", job.id)
            return job
        job = replace(job, attempts=dead.attempts, last_error=dead.error)
        if not dead.spent:
            log.error("job %s: %s; running attempt %d now", job.id, dead.error, dead.attempts)
            return job
        log.error("job %s: %s; no attempt left, failed", job.id, dead.error)
        outcome = Outcome("failed", error=dead.error)
        await self._commit_outcome(conn, job, outcome, time.monotonic())
        return None

    async def _spend_rolled_back_attempt(self, job: Job, exc: Exception) -> None:
        """The held transaction rolled back with its claim, so the attempt was not counted:
        count it now, with a backoff, or a job whose outcome cannot be written would rerun in
        a hot loop."""
        error, retry_in = rolled_back(job, self.app.tasks.get(job.task), exc)
        log.error("job %s: %s; attempt counted, next try in %.1fs", job.id, error, retry_in)
        try:
            async with self.pool.connection() as conn:
                await self.store.job_spend_rolled_back_attempt(conn, job.claim, error, retry_in)
        except (psycopg.Error, SkiplockError) as again:
            log.warning("job %s: could not count the rolled-back attempt: %s", job.id, again)

    async def _run_held(self, running: RunningJob, conn: AsyncConnection[Any]) -> None:
        """Run a held-lock job in its claim's transaction, write its outcome there and commit
        (no buffering).  A job an admin cancelled ends cancelled.  A job whose session ended
        meanwhile (see held_sessions) is stopped and reported lost, nothing written: its start
        stays recorded, so the job's next claim counts this attempt."""
        try:
            if running.stop_reason == "cancelled":  # asked before it started
                outcome = Outcome("cancelled")
            else:
                outcome = await self.reporter.outcome(running, conn)
        except asyncio.CancelledError:
            if running.stop_reason not in ("lost", "cancelled"):
                raise  # shutdown: the caller rolls back
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            outcome = Outcome("cancelled")
        finally:
            running.task = None  # the outcome is known: a late stop must not cut its commit short
        if running.claim_gone:
            await roll_back_quietly(conn)
            self.reporter.report_gone(running, outcome)
            return
        await self._commit_outcome(conn, running.job, outcome, running.started)

    async def _commit_outcome(
        self, conn: AsyncConnection[Any], job: Job, outcome: Outcome, started: float
    ) -> None:
        """Write a held-lock job's outcome in its claim's transaction, commit, report it."""
        owned = job.id in await self.completer.write(conn, [(job, outcome, started)])
        await conn.commit()
        self.reporter.recorded([Recorded(job, outcome, owned, started)])
