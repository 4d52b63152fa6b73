"""The worker: claims jobs into its free slots, runs them, records how they ended.

Lease model (default): the claim commits at once with ``locked_until``; one heartbeat statement
per tick extends the leases of all claimed jobs; outcomes are written in batches by the
:class:`~skiplock._runtime.completer.Completer`, each naming its claim (worker id, attempt and claim
time) so a worker whose lease was reclaimed changes nothing.  A claim may take more jobs than
there are free slots; :class:`~skiplock._runtime.capacity.Capacity` decides how many, and the extra
ones
wait in the worker, leased, until a slot frees.  Held model: claim, task and finish share one
transaction that keeps the row locked; a crash rolls it back and the job is claimable at once.

Shutdown (:meth:`Worker.stop`): stop claiming, give running jobs ``shutdown_grace`` seconds,
cancel the rest and give them back without spending their attempt, flush, resign
leadership.  A worker given ``max_jobs`` or ``max_memory`` (:mod:`skiplock._runtime.recycling`)
stops claiming once due, and :meth:`Worker.run` returns when every job it claimed has been run
and recorded.

This module has the worker's life cycle; claiming is in :mod:`skiplock._runtime.claiming`, the slots
that run leased jobs in :mod:`skiplock._runtime.leased_slots`, the held-lock slots in
:mod:`skiplock._runtime.held_slots`, running jobs and reporting their outcomes in
:mod:`skiplock._runtime.job_outcomes` (mixins of :class:`Worker`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Collection
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from skiplock._db.client_async import open_pool
from skiplock._db.migrations import all_migrations, check_migrated
from skiplock._db.payload import check_queue_name
from skiplock._db.queue_locks import QueueLockWaits
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.capacity import Capacity
from skiplock._runtime.claim_cursor import ClaimCursor
from skiplock._runtime.claiming import Claiming
from skiplock._runtime.completer import Completer
from skiplock._runtime.heartbeat import Heartbeat
from skiplock._runtime.held_cancels import watch_held_cancels
from skiplock._runtime.held_sessions import watch_held_sessions
from skiplock._runtime.held_slots import HeldSlots
from skiplock._runtime.job_outcomes import JobOutcomes
from skiplock._runtime.leader import LeaderElector
from skiplock._runtime.leased_slots import LeasedSlots, ParkedSlot
from skiplock._runtime.listener import Listener
from skiplock._runtime.maintenance import Maintenance
from skiplock._runtime.presence import Presence
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.recycling import Recycling
from skiplock._runtime.running import RunningJob
from skiplock._runtime.task_threads import TaskThreads
from skiplock.app import App
from skiplock.errors import SkiplockError
from skiplock.events import JobEvent, WorkerStats, new_worker_id
from skiplock.job import Job
from skiplock.task import WorkerModel

log = logging.getLogger("skiplock.worker")

__all__ = ["JobEvent", "Worker", "WorkerStats", "new_worker_id"]


async def cancel_and_wait(tasks: Collection[asyncio.Task[Any]], again_after: float = 1.0) -> None:
    """Cancel the tasks and wait until they end, cancelling again those still running after
    ``again_after`` seconds: on Python 3.11, ``asyncio.wait_for`` (psycopg waits with it) can
    lose a cancellation that races with the completion of what it waits for, and a service
    loop that lost its cancellation would keep the worker from ever stopping."""
    tasks = list(tasks)  # the caller's set shrinks as tasks end
    pending = set(tasks)
    for task in pending:
        task.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=again_after)
        for task in pending:
            task.cancel()
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: a service that failed was logged where it failed


class Worker(Claiming, LeasedSlots, HeldSlots, JobOutcomes):
    def __init__(
        self,
        app: App,
        *,
        queues: list[str] | None = None,
        concurrency: int = 10,
        prefetch: int = 500,
        max_in_flight: int | None = None,
        model: WorkerModel | None = None,
        lease_seconds: float = 30.0,
        poll_interval: float = 1.0,
        burst: bool = False,
        listen: bool = True,
        shutdown_grace: float = 30.0,
        worker_id: str | None = None,
        on_event: Callable[[JobEvent], None] | None = None,
        leader_ttl: float = 10.0,
        max_jobs: int | None = None,
        max_memory: int | None = None,
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
        self.capacity = Capacity(concurrency, prefetch, max_in_flight=max_in_flight)
        self.model = model
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.burst = burst
        self.listen = listen and not burst
        self.shutdown_grace = shutdown_grace
        self.leader_ttl = leader_ttl
        self.worker_id = worker_id or new_worker_id()
        # The app's event listeners, then on_event; none: no events are made (unless logged).
        self.listeners = [*app.event_listeners, *([on_event] if on_event else [])]
        self.recycling = Recycling(max_jobs=max_jobs, max_memory=max_memory)
        self.store = AsyncStore(app.queries)
        self.stats = WorkerStats()
        self.listener: Listener | None = None
        self.elector: LeaderElector | None = None
        self.maintenance: Maintenance | None = None
        self._running: dict[int, RunningJob] = {}  # every claimed job, reserved or started
        self._reserved: deque[RunningJob] = deque()  # claimed, waiting for a slot
        self._tasks: set[asyncio.Task[None]] = set()  # busy slots
        self._parked: deque[ParkedSlot] = deque()  # idle leased slots (see leased_slots.py)
        self._handlers = 0  # jobs whose task is running now (their outcomes are still to come)
        self._drained = False  # the last claim found less than it asked for
        self.claim_error: str | None = None  # see Claiming
        self._announced = 0  # counts announcements of new work (see _new_work)
        self._held = False
        self._refill_below = 1  # set by each claim round from the capacity
        self.claim_cursor = ClaimCursor()
        self.settings: QueueSettings | None = None
        self.queue_lock_waits = QueueLockWaits()  # limited queues whose claim lock is busy
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._pool: AsyncConnectionPool | None = None
        self._claim_conn: AsyncConnection[Any] | None = None  # see claiming.py
        self._completer: Completer | None = None
        self._executor: TaskThreads | None = None

    # -- public --------------------------------------------------------------------------

    @property
    def running_jobs(self) -> list[Job]:
        return [r.job for r in self._running.values()]

    @property
    def recycled(self) -> str | None:
        """Why this worker stopped claiming to make way for a fresh one (None: it did not)."""
        return self.recycling.reason

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
        self._executor = TaskThreads(self.concurrency)
        pool_size = 6 + (self.concurrency if held else 0)
        self._pool = await open_pool(
            dsn, self.store, min_size=2, max_size=pool_size, prepare=self.app.prepared_statements
        )
        try:
            await self._check_schema()
        except BaseException:
            await self._pool.close()
            self._executor.shutdown(wait=False)
            raise
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
            on_work=self._work_behind_cursor,
            queues=queues,
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
            self.store, self._pool, queues, self.poll_interval, on_resume=self._work_behind_cursor
        )
        presence = Presence(
            self.store,
            self._pool,
            self.worker_id,
            queues=queues,
            concurrency=self.concurrency,
            model="held" if held else "lease",
            counts=lambda: (len(self._running), self.stats.finished),
        )
        self._completer.start()  # stopped apart from the others, below: it must not be cut short
        services = [asyncio.create_task(heartbeat.run()), asyncio.create_task(presence.run())]
        if held:

            def running() -> list[RunningJob]:
                return list(self._running.values())

            services.append(asyncio.create_task(watch_held_sessions(running)))
            services.append(
                asyncio.create_task(
                    watch_held_cancels(running, self.store, self._pool, self.poll_interval)
                )
            )
        services.append(asyncio.create_task(self.settings.run()))
        if not self.burst:
            services.append(asyncio.create_task(self.elector.run()))
            services.append(asyncio.create_task(self.maintenance.run()))
        if self.recycling.max_memory is not None:
            services.append(asyncio.create_task(self.recycling.watch_memory(self._nudge)))
        if self.listen:
            self.listener = Listener(
                dsn,
                self.store,
                set(queues),
                self._new_work,
                on_cancel=self._cancel_requested,
                prepare=self.app.prepared_statements,
            )
            services.append(asyncio.create_task(self.listener.run()))
        try:
            await self.settings.refresh()
            await self._claim_loop(queues)
            await self._shut_down()
        finally:
            await cancel_and_wait(services)
            await cancel_and_wait([*self._tasks, *self._release_parked_slots()])
            await self._release_claim_connection()
            await self._completer.stop()
            await self.elector.resign()
            await presence.forget()
            await self._pool.close(timeout=5.0)
            self._executor.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped: %s", self.worker_id, self.stats)
        return self.stats

    async def _check_schema(self) -> None:
        """Refuse to start on a schema without the migrations this version's statements need
        (an upgrade deployed before `skiplock migrate` ran): say so once, not at every claim."""
        assert self._pool is not None
        versions = [m.version for m in all_migrations()]
        async with self._pool.connection() as conn:
            missing = await self.store.migration_pending(conn, versions)
        check_migrated(self.app.schema, missing)

    # -- claiming ------------------------------------------------------------------------

    def _nudge(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- shutdown ------------------------------------------------------------------------

    async def _shut_down(self) -> None:
        assert self._completer is not None
        self._release_parked_slots()  # idle: they end at their next turn
        while self._reserved:  # never started: back to the queue without spending an attempt,
            self._give_back(self._reserved.popleft())  # or cancelled if an admin asked
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
