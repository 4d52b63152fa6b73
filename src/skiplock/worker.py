"""The worker: claims jobs into its free slots, runs them, records how they ended.

Lease model (default): the claim commits at once with ``locked_until``; one heartbeat statement
per tick extends the leases of all claimed jobs; outcomes are written in batches by the
:class:`~skiplock._runtime.completer.Completer`, each naming its claim (worker id, attempt and claim
time) so a worker whose lease was reclaimed changes nothing.  A claim may take more jobs than
there are free slots; :class:`~skiplock._runtime.capacity.Capacity` decides how many, and the extra
ones wait in the worker, leased, until a slot frees.  Held model: claim, task and finish share
one transaction that keeps the row locked; a crash rolls it back and the job is claimable at once.

A leasing worker's claims, heartbeats, outcomes and reclaims go through the app's backend
(:mod:`skiplock.backends`); the rest (held-lock jobs, queue settings, wake-ups, presence,
leadership, upkeep) is PostgreSQL's, on the app's database (docs/backends.md).

Shutdown (:meth:`Worker.stop`): stop claiming, give running jobs ``shutdown_grace`` seconds,
cancel the rest and give them back without spending their attempt, flush, resign
leadership.  A worker given ``max_jobs`` or ``max_memory`` (:mod:`skiplock._runtime.recycling`)
stops claiming once due, and :meth:`Worker.run` returns when every job it claimed has been run
and recorded.

This module is the composition root: :class:`Worker` builds the services, runs them and shuts
them down.  They share one :class:`~skiplock._runtime.worker_state.WorkerState`; the claim loop is
in :mod:`skiplock._runtime.claim_loop`, the slots behind one interface
(:mod:`skiplock._runtime.slots`) in :mod:`skiplock._runtime.leased_slots` and
:mod:`skiplock._runtime.held_slots`, running jobs and reporting their outcomes in
:mod:`skiplock._runtime.job_outcomes`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Collection, Mapping
from typing import Any

from psycopg_pool import AsyncConnectionPool

from skiplock._db.bounds import check_queue_name
from skiplock._db.client_async import open_pool
from skiplock._db.connections import WORKER_APPLICATION_NAME, WORKER_POOL_MIN, worker_pool_max
from skiplock._db.migrations import all_migrations, check_migrated
from skiplock._db.queue_locks import QueueLockWaits
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.capacity import Capacity
from skiplock._runtime.claim_cursor import ClaimCursor
from skiplock._runtime.claim_loop import ClaimLoop
from skiplock._runtime.completer import Recorded
from skiplock._runtime.heartbeat import Heartbeat
from skiplock._runtime.held_cancels import watch_held_cancels
from skiplock._runtime.held_sessions import watch_held_sessions
from skiplock._runtime.held_slots import HeldSlots, claims_held
from skiplock._runtime.job_outcomes import OutcomeReporter
from skiplock._runtime.leader import LeaderElector
from skiplock._runtime.leased_claims import LeasedClaims
from skiplock._runtime.leased_slots import LeasedSlots
from skiplock._runtime.listener import Listener
from skiplock._runtime.maintenance import Maintenance
from skiplock._runtime.presence import Presence
from skiplock._runtime.progress_writer import ProgressWriter
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.recycling import Recycling
from skiplock._runtime.slots import Slots
from skiplock._runtime.task_threads import TaskThreads
from skiplock._runtime.worker_state import WorkerState
from skiplock._task_settings import WorkerModel
from skiplock.app import App
from skiplock.backends.base import Backend
from skiplock.backends.postgres import PostgresBackend
from skiplock.errors import NoConnectionSlot, SkiplockError
from skiplock.events import JobEvent, WorkerStats, new_worker_id
from skiplock.job import Job

log: logging.Logger = logging.getLogger("skiplock.worker")

# Seconds between tries to start on a server with no connection slot free: doubling from the
# first, jittered, up to the last (a fleet restarted at once does not come back in step).
NO_SLOT_BACKOFF = (1.0, 30.0)

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


class Worker:
    def __init__(
        self,
        app: App,
        *,
        queues: list[str] | Mapping[str, int] | None = None,
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
        self.queues: list[str] | None = [check_queue_name(q) for q in queues] if queues else None
        # Queues given with weights ({"a": 3, "b": 1}): a takes three turns at the claims for
        # each of b's while both have work (docs/design.md, "Fair shares: queues take turns").
        self.queue_weights: dict[str, int] = {}
        if isinstance(queues, Mapping):
            for queue, weight in queues.items():
                if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                    raise ValueError(f"queue {queue!r}: its weight must be an integer >= 1")
            self.queue_weights = dict(queues)
        self.concurrency = concurrency
        self.capacity: Capacity = Capacity(concurrency, prefetch, max_in_flight=max_in_flight)
        self.model: WorkerModel | None = model
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.burst = burst
        self.listen: bool = listen and not burst
        self.shutdown_grace = shutdown_grace
        self.leader_ttl = leader_ttl
        self.worker_id: str = worker_id or new_worker_id()
        # The app's event listeners, then on_event; none: no events are made (unless logged).
        self.listeners: list[Callable[[JobEvent], None]] = [
            *app.event_listeners,
            *([on_event] if on_event else []),
        ]
        self.recycling: Recycling = Recycling(max_jobs=max_jobs, max_memory=max_memory)
        self.store: AsyncStore = AsyncStore(app.queries)
        self.stats: WorkerStats = WorkerStats()
        self.state: WorkerState = WorkerState()  # what the services below share
        self.claim_cursor: ClaimCursor = ClaimCursor()
        self.queue_lock_waits: QueueLockWaits = (
            QueueLockWaits()
        )  # limited queues whose claim lock is busy
        # The services, made by run().
        self.settings: QueueSettings | None = None
        self.listener: Listener | None = None
        self.elector: LeaderElector | None = None
        self.maintenance: Maintenance | None = None
        self.reporter: OutcomeReporter | None = None
        self.slots: Slots | None = None
        self.claims: ClaimLoop | None = None
        self._pool: AsyncConnectionPool | None = None
        # The app's backend as run() uses it: PostgreSQL's on the worker's own pool.
        self.backend: Backend = app.backend

    # -- public --------------------------------------------------------------------------

    @property
    def running_jobs(self) -> list[Job]:
        return [r.job for r in self.state.running.values()]

    @property
    def recycled(self) -> str | None:
        """Why this worker stopped claiming to make way for a fresh one (None: it did not)."""
        return self.recycling.reason

    @property
    def claim_error(self) -> str | None:
        """Why the last claim failed (None: it did not): a burst that ends on a failed claim
        did not run what was due, and ``skiplock worker --burst`` exits 1."""
        return self.claims.claim_error if self.claims is not None else None

    def stop(self) -> None:
        """Stop claiming; :meth:`run` returns after the shutdown described in the module doc."""
        self.state.stopping = True
        if self.claims is not None:
            self.claims.nudge()

    async def run(self) -> WorkerStats:
        queues = self.queues or sorted({t.queue for t in self.app.tasks.values()})
        if not queues:
            raise SkiplockError("the worker has no queue: register a task or pass --queues")
        dsn = self.app.dsn
        held = self._claims_held(queues)
        executor = TaskThreads(self.concurrency)
        opened = await self._open_pool(dsn, worker_pool_max(self.concurrency, held))
        if opened is None:  # stopped while it waited for a connection slot
            executor.shutdown(wait=False)
            return self.stats
        pool = self._pool = opened
        try:
            await self._check_schema()
        except BaseException:
            await pool.close()
            executor.shutdown(wait=False)
            raise
        state, store = self.state, self.store
        backend = self.backend = worker_backend(self.app.backend, pool, store)
        # The claim loop hears from the services made before it (new work, freed room, written
        # outcomes); it is made last, as it claims through the slots.
        claims: ClaimLoop

        def work_behind_cursor() -> None:
            claims.work_behind_cursor()

        def capacity_freed() -> None:
            claims.capacity_freed()

        def recorded(batch: list[Recorded]) -> None:
            claims.recorded(batch)

        reporter = self.reporter = OutcomeReporter(
            self.app,
            store,
            backend,
            state,
            worker_id=self.worker_id,
            stats=self.stats,
            listeners=self.listeners,
            executor=executor,
            on_recorded=recorded,
        )
        completer = reporter.completer
        self.elector = LeaderElector(store, pool, self.worker_id, ttl=self.leader_ttl)
        maintenance = self.maintenance = Maintenance(
            self.app,
            store,
            pool,
            self.elector,
            interval=self.poll_interval,
            reclaim_interval=min(self.lease_seconds / 2, 5.0),
            on_work=work_behind_cursor,
            queues=queues,
            backend=backend,
        )
        log.info(
            "worker %s started: queues=%s concurrency=%d model=%s",
            self.worker_id,
            ",".join(queues),
            self.concurrency,
            "held" if held else "lease",
        )
        heartbeat = Heartbeat(backend, self.lease_seconds, state.jobs)
        progress = ProgressWriter(store, pool, state.jobs)
        settings = self.settings = QueueSettings(
            store, pool, queues, self.poll_interval, on_resume=work_behind_cursor
        )
        presence = Presence(
            store,
            pool,
            self.worker_id,
            queues=queues,
            concurrency=self.concurrency,
            model="held" if held else "lease",
            counts=lambda: (len(state.running), self.stats.finished),
        )
        slots: Slots
        if held:
            slots = HeldSlots(
                self.app,
                store,
                pool,
                state,
                reporter,
                settings,
                self.queue_lock_waits,
                self.recycling,
                concurrency=self.concurrency,
                model=self.model,
                worker_id=self.worker_id,
                lease_seconds=self.lease_seconds,
                on_freed=capacity_freed,
                weights=self.queue_weights,
            )
        else:
            leased_claims = LeasedClaims(
                backend,
                store,
                pool,
                settings,
                self.claim_cursor,
                self.queue_lock_waits,
                worker_id=self.worker_id,
                lease_seconds=self.lease_seconds,
                weights=self.queue_weights,
            )
            slots = LeasedSlots(
                state,
                leased_claims,
                reporter,
                self.capacity,
                settings,
                self.recycling,
                lease_seconds=self.lease_seconds,
                on_freed=capacity_freed,
                on_taken=lambda: claims.claim_if_due(),
            )
        self.slots = slots
        claims = self.claims = ClaimLoop(
            state,
            slots,
            completer,
            self.capacity,
            self.claim_cursor,
            settings,
            self.recycling,
            maintenance,
            burst=self.burst,
            poll_interval=self.poll_interval,
        )
        completer.start()  # stopped apart from the others, below: it must not be cut short
        services = [
            asyncio.create_task(heartbeat.run()),
            asyncio.create_task(presence.run()),
            asyncio.create_task(progress.run()),
        ]
        if held:
            services.append(asyncio.create_task(watch_held_sessions(state.jobs)))
            services.append(
                asyncio.create_task(watch_held_cancels(state.jobs, store, pool, self.poll_interval))
            )
        services.append(asyncio.create_task(settings.run()))
        if not self.burst:
            services.append(asyncio.create_task(self.elector.run()))
            services.append(asyncio.create_task(maintenance.run()))
        if self.recycling.max_memory is not None:
            services.append(asyncio.create_task(self.recycling.watch_memory(claims.nudge)))
        if self.listen:
            self.listener = Listener(
                dsn,
                store,
                set(queues),
                claims.new_work,
                on_cancel=state.cancel_requested,
                prepare=self.app.prepared_statements,
            )
            claims.idle_mark = self.listener
            services.append(asyncio.create_task(self.listener.run()))
        try:
            await settings.refresh()
            await claims.run(queues)
            await self._shut_down(slots)
        finally:
            await cancel_and_wait(services)
            await cancel_and_wait([*state.busy, *slots.let_go_idle()])
            await slots.close()
            await completer.stop()
            await self.elector.resign()
            await presence.forget()
            await pool.close(timeout=5.0)
            executor.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped: %s", self.worker_id, self.stats)
        return self.stats

    async def _open_pool(self, dsn: str, max_size: int) -> AsyncConnectionPool | None:
        """The worker's pool; while the server has no connection slot free, say so and try
        again with backoff (a slot frees when any session ends: exiting, to be restarted at
        once, would only add to the load).  None: :meth:`stop` came first."""
        delay, longest = NO_SLOT_BACKOFF
        while True:
            try:
                return await open_pool(
                    dsn,
                    self.store,
                    min_size=WORKER_POOL_MIN,
                    max_size=max_size,
                    prepare=self.app.prepared_statements,
                    application_name=WORKER_APPLICATION_NAME,
                )
            except NoConnectionSlot as exc:
                wait = delay * random.uniform(0.5, 1.0)
                log.warning("worker %s cannot start: %s; trying again in %.1fs",
                            self.worker_id, exc, wait)  # fmt: skip
            ends = asyncio.get_running_loop().time() + wait
            while not self.state.stopping and asyncio.get_running_loop().time() < ends:
                await asyncio.sleep(min(0.1, ends - asyncio.get_running_loop().time()))
            if self.state.stopping:
                return None
            delay = min(delay * 2, longest)

    def _claims_held(self, queues: list[str]) -> bool:
        return claims_held(self.app, self.model, queues)

    async def _check_schema(self) -> None:
        """Refuse to start on a schema without the migrations this version's statements need
        (an upgrade deployed before `skiplock migrate` ran): say so once, not at every claim."""
        assert self._pool is not None
        versions = [m.version for m in all_migrations()]
        async with self._pool.connection() as conn:
            missing = await self.store.migration_pending(conn, versions)
        check_migrated(self.app.schema, missing)

    async def _shut_down(self, slots: Slots) -> None:
        state = self.state
        slots.let_go_idle()  # idle: they end at their next turn
        slots.give_back_waiting()  # never started: back to the queue, attempt unspent
        if state.busy:
            log.info(
                "waiting up to %.0fs for %d running jobs",
                self.shutdown_grace,
                len(state.running),
            )
            _, late = await asyncio.wait(set(state.busy), timeout=self.shutdown_grace)
            for running in list(state.running.values()):
                running.stop("shutdown")
            for task in late:
                task.cancel()  # held-lock slots: their transactions roll back
            await asyncio.gather(*late, return_exceptions=True)


def worker_backend(backend: Backend, pool: AsyncConnectionPool, store: AsyncStore) -> Backend:
    """The backend a worker's leased jobs go through: the app's, and for PostgreSQL's the same
    on the worker's own pool (sized for its claims, heartbeats and outcome writes) and store.
    A subclass, or a wrapper, is another backend: its methods are what it says they are."""
    if type(backend) is PostgresBackend:
        return backend.on_pool(pool, store)
    return backend
