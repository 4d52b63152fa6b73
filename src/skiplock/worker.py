"""The worker: claims jobs into its free slots, runs them, records how they ended.

Lease model (default): the claim commits at once with ``locked_until``; one heartbeat statement
per tick extends the leases of all claimed jobs; outcomes are written in batches by the
:class:`~skiplock.completer.Completer`, each naming its claim (worker id + attempt) so a worker
whose lease was reclaimed changes nothing.  A claim may take more jobs than there are free
slots; :class:`~skiplock.capacity.Capacity` decides how many, and the extra ones wait in the
worker, leased, until a slot frees.  Held model: claim, task and finish share one
transaction that keeps the row locked; a crash rolls it back and the job is claimable at once.

Shutdown (:meth:`Worker.stop`): stop claiming, give running jobs ``shutdown_grace`` seconds,
cancel the rest and give them back without spending their attempt, flush, resign leadership.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from ._client_async import open_pool
from ._store_async import AsyncStore
from .app import App
from .capacity import Capacity
from .completer import Completer, Recorded
from .errors import SkiplockError, UnknownTask
from .events import JobEvent, WorkerStats, finished_level, log_event, new_worker_id
from .execution import Outcome, rolled_back, run_job
from .heartbeat import Heartbeat
from .job import Job
from .leader import LeaderElector
from .listener import Listener
from .maintenance import Maintenance
from .payload import check_queue_name
from .queue_settings import QueueSettings
from .running import RunningJob
from .task import WorkerModel

log = logging.getLogger("skiplock.worker")

EMPTY_CLAIM_COOLDOWN = 0.005  # seconds; caps claims per idle worker at ~200/s under a NOTIFY flood

__all__ = ["JobEvent", "Worker", "WorkerStats", "new_worker_id"]


class Worker:
    def __init__(
        self,
        app: App,
        *,
        queues: list[str] | None = None,
        concurrency: int = 10,
        prefetch: int = 500,
        model: WorkerModel | None = None,
        lease_seconds: float = 30.0,
        poll_interval: float = 1.0,
        burst: bool = False,
        listen: bool = True,
        shutdown_grace: float = 30.0,
        worker_id: str | None = None,
        on_event: Callable[[JobEvent], None] | None = None,
        leader_ttl: float = 10.0,
    ) -> None:
        if concurrency < 1 or prefetch < 0:
            raise ValueError("concurrency must be >= 1 and prefetch >= 0")
        if lease_seconds <= 0 or poll_interval <= 0 or shutdown_grace < 0:
            raise ValueError("lease_seconds and poll_interval must be > 0, shutdown_grace >= 0")
        if model not in (None, "lease", "held"):
            raise ValueError(f"model must be 'lease' or 'held', got {model!r}")
        self.app = app
        self.queues = [check_queue_name(q) for q in queues] if queues else None
        self.concurrency = concurrency
        self.capacity = Capacity(concurrency, prefetch)
        self.model = model
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.burst = burst
        self.listen = listen and not burst
        self.shutdown_grace = shutdown_grace
        self.leader_ttl = leader_ttl
        self.worker_id = worker_id or new_worker_id()
        self.on_event = on_event
        self.store = AsyncStore(app.queries)
        self.stats = WorkerStats()
        self.listener: Listener | None = None
        self.elector: LeaderElector | None = None
        self.maintenance: Maintenance | None = None
        self._running: dict[int, RunningJob] = {}  # every claimed job, reserved or started
        self._reserved: deque[RunningJob] = deque()  # claimed, waiting for a slot
        self._tasks: set[asyncio.Task[None]] = set()
        self._handlers = 0  # jobs whose task is running now (their outcomes are still to come)
        self._drained = False  # the last claim found less than it asked for
        self._announced = 0  # counts announcements of new work (see _new_work)
        self._held = False
        self._refill_below = 1  # set by each claim round from the capacity
        self.settings: QueueSettings | None = None
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._pool: AsyncConnectionPool | None = None
        self._completer: Completer | None = None
        self._executor: ThreadPoolExecutor | None = None

    # -- public --------------------------------------------------------------------------

    @property
    def running_jobs(self) -> list[Job]:
        return [r.job for r in self._running.values()]

    def stop(self) -> None:
        """Stop claiming; :meth:`run` returns after the shutdown described in the module doc."""
        self._stopping = True
        self._nudge()

    async def run(self) -> WorkerStats:
        queues = self.queues or sorted({t.queue for t in self.app.tasks.values()})
        if not queues:
            raise SkiplockError("the worker has no queue: register a task or pass --queues")
        dsn = self.app.dsn
        held = self._held = self._claims_held(queues)
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="skiplock-task")
        pool_size = 6 + (self.concurrency if held else 0)
        self._pool = await open_pool(dsn, min_size=2, max_size=pool_size)
        self._completer = Completer(
            self.store,
            self._pool,
            self.app.completion,
            on_recorded=self._recorded,
            still_running=lambda: self._handlers,
        )
        self.elector = LeaderElector(self.store, self._pool, self.worker_id, ttl=self.leader_ttl)
        self.maintenance = Maintenance(
            self.app,
            self.store,
            self._pool,
            self.elector,
            interval=self.poll_interval,
            reclaim_interval=min(self.lease_seconds / 2, 5.0),
            on_work=self._new_work,
        )
        log.info(
            "worker %s started: queues=%s concurrency=%d model=%s",
            self.worker_id,
            ",".join(queues),
            self.concurrency,
            "held" if held else "lease",
        )
        heartbeat = Heartbeat(
            self.store,
            self._pool,
            self.lease_seconds,
            lambda: list(self._running.values()),
        )
        self.settings = QueueSettings(
            self.store, self._pool, queues, self.poll_interval, on_resume=self._new_work
        )
        self._completer.start()  # stopped apart from the others, below: it must not be cut short
        services = [asyncio.create_task(heartbeat.run())]
        services.append(asyncio.create_task(self.settings.run()))
        if not self.burst:
            services.append(asyncio.create_task(self.elector.run()))
            services.append(asyncio.create_task(self.maintenance.run()))
        if self.listen:
            self.listener = Listener(dsn, self.store, set(queues), self._new_work)
            services.append(asyncio.create_task(self.listener.run()))
        try:
            await self.settings.refresh()
            await self._claim_loop(queues, held)
            await self._shut_down()
        finally:
            for service in services:
                service.cancel()
            await asyncio.gather(*services, return_exceptions=True)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._completer.stop()
            await self.elector.resign()
            await self._pool.close(timeout=5.0)
            self._executor.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped: %s", self.worker_id, self.stats)
        return self.stats

    # -- claiming ------------------------------------------------------------------------

    def _nudge(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _new_work(self) -> None:
        """Jobs may have become claimable (a NOTIFY, a promotion, a resumed queue)."""
        self._drained = False
        self._announced += 1
        self._nudge()

    def _want(self, held: bool) -> int:
        """How many jobs to claim now."""
        assert self._completer is not None
        unwritten = self._completer.pending
        if held:  # one transaction per slot; a finished job keeps its slot until written
            return self.concurrency - len(self._tasks) - unwritten
        return self.capacity.to_claim(len(self._tasks), len(self._reserved), unwritten)

    def _capacity_freed(self) -> None:
        """A job finished or its outcome was written: start what is reserved, claim if due."""
        if self._stopping:
            return
        self._start_reserved()
        claimed = len(self._tasks) + len(self._reserved)
        if not self._drained and (not self._reserved or claimed < self._refill_below):
            self._nudge()
        elif self.burst:
            self._nudge()  # the burst may be over

    def _claims_held(self, queues: list[str]) -> bool:
        if self.model is not None:
            return self.model == "held"
        return any(t.settings.model == "held" for t in self.app.tasks.values() if t.queue in queues)

    def _model_of(self, job: Job) -> WorkerModel:
        if self.model is not None:
            return self.model
        task = self.app.tasks.get(job.task)
        return (task.settings.model if task else None) or "lease"

    async def _claim_loop(self, queues: list[str], held: bool) -> None:
        assert self._wake is not None and self._completer is not None
        assert self.settings is not None
        settings = self.settings
        idle_rounds = 0
        empty_claims = 0  # claims in a row that found nothing
        while not self._stopping:
            await asyncio.sleep(0)  # let jobs that are about to finish free their slots first
            # Cleared every round: a wake-up that came while nothing could be claimed (all slots
            # busy, queues paused) must not make the wait below return at once, forever.
            self._wake.clear()
            want = self._want(held)
            self._refill_below = self.capacity.refill_below()
            active = [q for q in queues if q not in settings.paused]
            claimed = 0
            if want > 0 and active and not self._drained:
                announced = self._announced
                try:
                    claim = self._claim_held if held else self._claim_leased
                    claimed = await claim(active, want)
                except (psycopg.Error, SkiplockError) as exc:
                    log.warning("claim failed, retrying after the poll interval: %s", exc)
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
            if self.burst and not in_flight:
                # Nothing claimable, nothing running: run maintenance once more, then finish.
                idle_rounds += 1
                if idle_rounds > 1:
                    return
                assert self.maintenance is not None
                await self.maintenance.run_once(force=True)
                self._drained = False  # it may have promoted or enqueued jobs: look once more
                continue
            # Claims keep coming back empty: let wake-ups that arrive in the next moment collapse
            # into one, so a flood of NOTIFYs (anyone may send them) cannot drive claims.  The
            # first empty claim after work waits for nothing, so a new job starts at once.
            if empty_claims > 1:
                await asyncio.sleep(EMPTY_CLAIM_COOLDOWN)
            # Jittered, so that workers started together do not poll in step.
            try:
                await asyncio.wait_for(
                    self._wake.wait(), self.poll_interval * random.uniform(0.8, 1.2)
                )
            except TimeoutError:
                self._drained = False  # the poll: look again whatever was (not) announced

    async def _claim_leased(self, queues: list[str], limit: int) -> int:
        assert self._pool is not None and self.settings is not None
        limits = self.settings.limits
        unlimited = [q for q in queues if q not in limits]
        # A queue with a concurrency limit gets no more than the slots can start now: a job
        # waiting here would count against its limit while other workers' slots sit idle.
        limit_startable = min(limit, self.concurrency - len(self._tasks) - len(self._reserved))
        jobs: list[Job] = []
        async with self._pool.connection() as conn:
            if unlimited:
                jobs += await self.store.job_claim(
                    conn, unlimited, limit, self.worker_id, self.lease_seconds
                )
            for queue in (q for q in queues if q in limits):
                if len(jobs) >= limit_startable:
                    break
                jobs += await self.store.job_claim_limited(
                    conn,
                    queue,
                    limit_startable - len(jobs),
                    limits[queue],
                    self.worker_id,
                    self.lease_seconds,
                )
        for job in jobs:
            self._reserved.append(self._track(job, "lease"))
        self._start_reserved()
        return len(jobs)

    def _start_reserved(self) -> None:
        assert self._completer is not None and self.settings is not None
        startable = self.capacity.startable(len(self._tasks), self._completer.pending)
        while startable > 0 and self._reserved and not self._stopping:
            running = self._reserved.popleft()
            if running.stop_reason is not None or running.job.queue in self.settings.paused:
                # Cancelled by an admin, or its queue paused, while it waited for a slot.
                self._untrack(running)
                cancelled = running.stop_reason == "cancelled"
                outcome = Outcome("cancelled") if cancelled else Outcome("release")
                self._completer.submit(running.job, outcome, running.started)
                continue
            running.started = time.monotonic()
            self._emit_started(running.job)
            running.task = self._spawn(self._run_leased(running))
            startable -= 1

    async def _claim_held(self, queues: list[str], limit: int) -> int:
        claimed = 0
        for _ in range(limit):
            got: asyncio.Future[Job | None] = asyncio.get_running_loop().create_future()
            slot: asyncio.Task[None] = asyncio.create_task(self._held_slot(queues, got))
            self._tasks.add(slot)
            try:
                job = await got
            except BaseException:
                job = None
                raise
            finally:
                if job is None:  # an empty claim: let its transaction end before counting slots
                    await asyncio.gather(slot, return_exceptions=True)
                    self._tasks.discard(slot)
            if job is None:
                break
            slot.add_done_callback(self._slot_freed)
            claimed += 1
        return claimed

    async def _held_slot(self, queues: list[str], got: asyncio.Future[Job | None]) -> None:
        assert self._pool is not None
        running: RunningJob | None = None
        try:
            async with self._pool.connection() as conn, conn.transaction():
                jobs = await self.store.job_claim(
                    conn, queues, 1, self.worker_id, self.lease_seconds
                )
                job = jobs[0] if jobs else None
                got.set_result(job)
                if job is None:
                    return
                if self._model_of(job) == "held":
                    running = self._track(job, "held")
                    self._emit_started(job)
                    await self._run_held(running, conn)
                    return
            # A lease task claimed by a held-capable worker: the claim has committed.
            running = self._track(job, "lease")
            self._emit_started(job)
            running.task = asyncio.current_task()
            await self._run_leased(running)
        except Exception as exc:
            if not got.done():
                got.set_exception(exc)
            elif running is not None and running.model == "held":
                await self._spend_rolled_back_attempt(running.job, exc)
        finally:
            if running is not None and running.model == "held":
                self._untrack(running)

    async def _spend_rolled_back_attempt(self, job: Job, exc: Exception) -> None:
        """The held transaction rolled back with its claim, so the attempt was not counted:
        count it now, with a backoff, or a job whose outcome cannot be written would rerun in
        a hot loop."""
        error, retry_in = rolled_back(job, self.app.tasks.get(job.task), exc)
        log.error("job %s: %s; attempt counted, next try in %.1fs", job.id, error, retry_in)
        try:
            assert self._pool is not None
            async with self._pool.connection() as conn:
                await self.store.job_spend_rolled_back_attempt(conn, job.claim, error, retry_in)
        except (psycopg.Error, SkiplockError) as again:
            log.warning("job %s: could not count the rolled-back attempt: %s", job.id, again)

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._slot_freed)
        return task

    def _slot_freed(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._capacity_freed()

    def _track(self, job: Job, model: WorkerModel) -> RunningJob:
        self.stats.claimed += 1
        running = RunningJob(job, model)
        self._running[job.id] = running
        return running

    def _emit_started(self, job: Job) -> None:
        if self.on_event is not None or log.isEnabledFor(logging.DEBUG):
            self._emit(JobEvent("started", job, self.worker_id))

    def _untrack(self, running: RunningJob) -> None:
        self._running.pop(running.job.id, None)

    # -- running -------------------------------------------------------------------------

    async def _outcome(self, running: RunningJob, conn: AsyncConnection[Any] | None) -> Outcome:
        job = running.job
        task = self.app.tasks.get(job.task)
        unknown = None if task else UnknownTask(job.task, list(self.app.tasks))
        assert self._executor is not None
        outcome = await run_job(
            job, task, worker_id=self.worker_id, executor=self._executor, conn=conn,
            unknown=unknown, cancel_flag=lambda: running.cancel_flag,
        )  # fmt: skip
        self.stats.timed_out += outcome.timed_out
        return outcome

    async def _run_leased(self, running: RunningJob) -> None:
        assert self._completer is not None
        self._handlers += 1
        try:
            outcome = await self._outcome(running, None)
        except asyncio.CancelledError:
            reason = running.stop_reason
            if reason is None:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            outcome = Outcome("cancelled" if reason == "cancelled" else "release")
        finally:
            self._handlers -= 1
            self._untrack(running)
        self._completer.submit(running.job, outcome, running.started)

    async def _run_held(self, running: RunningJob, conn: AsyncConnection[Any]) -> None:
        """Run and record a held-lock job in its claim's transaction (no buffering)."""
        assert self._completer is not None
        outcome = await self._outcome(running, conn)
        entry = (running.job, outcome, running.started)
        owned = running.job.id in await self._completer.write(conn, [entry])
        self._recorded([Recorded(*entry[:2], owned, running.started)])

    def _recorded(self, batch: list[Recorded]) -> None:
        """Outcomes were written (or found lost): count and report them, refill the slots."""
        now = time.monotonic()
        for recorded in batch:
            job, outcome = recorded.job, recorded.outcome
            kind = outcome.kind if recorded.owned else "lost"
            if kind == "done":
                self.stats.done += 1
            else:
                self.stats.count(kind)
            if self.on_event is not None or log.isEnabledFor(finished_level(kind)):
                duration = now - recorded.started
                event = JobEvent("finished", job, self.worker_id, kind, duration, outcome.error)
                self._emit(event)
        self.capacity.throughput.add(len(batch))
        self._capacity_freed()

    def _emit(self, event: JobEvent) -> None:
        log_event(event)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                log.exception("on_event hook failed")

    # -- shutdown ------------------------------------------------------------------------

    async def _shut_down(self) -> None:
        assert self._completer is not None
        while self._reserved:  # never started: back to the queue without spending an attempt
            running = self._reserved.popleft()
            self._untrack(running)
            self._completer.submit(running.job, Outcome("release"), running.started)
        if self._tasks:
            log.info(
                "waiting up to %.0fs for %d running jobs",
                self.shutdown_grace,
                len(self._running),
            )
            _, late = await asyncio.wait(set(self._tasks), timeout=self.shutdown_grace)
            for running in list(self._running.values()):
                running.stop("shutdown")
            for task in late:
                task.cancel()  # held-lock slots: their transactions roll back
            await asyncio.gather(*late, return_exceptions=True)
