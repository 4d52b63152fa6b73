"""The worker: claims jobs into free slots, runs them, records how they ended.

Lease model (default): the claim commits at once with ``locked_until``; a heartbeat extends
the leases of running jobs; every finish names the claim (worker id + attempt) so a worker
whose lease was reclaimed changes nothing.  Held model: claim, task and finish run in one
transaction that keeps the row locked; a crash rolls it back and the job is claimable again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from ._store_async import AsyncStore
from .app import App
from .database import connect_kwargs
from .errors import SkiplockError, UnknownTask
from .execution import Outcome, run_job
from .job import Job
from .payload import check_queue_name
from .task import WorkerModel

log = logging.getLogger("skiplock.worker")


def new_worker_id() -> str:
    """Unique per process start, so a restarted worker never passes for its predecessor."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class WorkerStats:
    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    snoozed: int = 0
    lost: int = 0
    reclaimed: int = 0


_COUNTERS = {"done": "done", "retry": "retried", "failed": "failed", "snooze": "snoozed"}


@dataclass
class _Running:
    job: Job
    model: WorkerModel
    lost: bool = False
    started: float = field(default_factory=time.monotonic)


class Worker:
    def __init__(
        self,
        app: App,
        *,
        queues: list[str] | None = None,
        concurrency: int = 10,
        model: WorkerModel | None = None,
        lease_seconds: float = 30.0,
        poll_interval: float = 1.0,
        burst: bool = False,
        worker_id: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if lease_seconds <= 0 or poll_interval <= 0:
            raise ValueError("lease_seconds and poll_interval must be > 0")
        if model not in (None, "lease", "held"):
            raise ValueError(f"model must be 'lease' or 'held', got {model!r}")
        self.app = app
        self.queues = [check_queue_name(q) for q in queues] if queues else None
        self.concurrency = concurrency
        self.model = model
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.burst = burst
        self.worker_id = worker_id or new_worker_id()
        self.store = AsyncStore(app.queries)
        self.stats = WorkerStats()
        self._running: dict[int, _Running] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._stopping = False
        self._pool: AsyncConnectionPool | None = None
        self._executor: ThreadPoolExecutor | None = None

    # -- public --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; ``run`` returns once the running jobs have finished."""
        self._stopping = True
        self._wake.set()

    async def run(self) -> WorkerStats:
        queues = self.queues or sorted({t.queue for t in self.app.tasks.values()})
        if not queues:
            raise SkiplockError("the worker has no queue: register a task or pass queues")
        dsn = self.app.dsn
        held = self._claims_held(queues)
        self._wake = asyncio.Event()  # bound to this run's event loop
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="skiplock-task")
        self._pool = AsyncConnectionPool(
            dsn, kwargs=connect_kwargs(dsn), min_size=1, max_size=self.concurrency + 3, open=False
        )
        await self._pool.open(wait=True, timeout=15)
        log.info(
            "worker %s started: queues=%s concurrency=%d model=%s",
            self.worker_id,
            ",".join(queues),
            self.concurrency,
            "held" if held else "lease",
        )
        services = [asyncio.create_task(self._heartbeat()), asyncio.create_task(self._maintain())]
        if not self.burst:
            services.append(asyncio.create_task(self._listen(dsn, set(queues))))
        try:
            await self._claim_loop(queues, held)
            while self._tasks:
                await asyncio.wait(set(self._tasks))
        finally:
            for service in services:
                service.cancel()
            await asyncio.gather(*services, return_exceptions=True)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._pool.close()
            self._executor.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped: %s", self.worker_id, self.stats)
        return self.stats

    # -- claiming ------------------------------------------------------------------------

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
        idle_promoted = False
        while not self._stopping:
            free = self.concurrency - len(self._tasks)
            claimed = 0
            if free > 0:
                self._wake.clear()
                try:
                    claimed = await (
                        self._claim_held(queues, free) if held else self._claim_leased(queues, free)
                    )
                except (psycopg.Error, SkiplockError) as exc:
                    log.warning("claim failed, retrying after the poll interval: %s", exc)
            if claimed:
                idle_promoted = False
                continue
            if self.burst and not self._tasks:
                # Nothing claimable and nothing running: promote what became due, or finish.
                if idle_promoted:
                    return
                idle_promoted = True
                await self._promote()
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)

    async def _claim_leased(self, queues: list[str], limit: int) -> int:
        assert self._pool is not None
        async with self._pool.connection() as conn:
            jobs = await self.store.job_claim(
                conn, queues, limit, self.worker_id, self.lease_seconds
            )
        for job in jobs:
            self._start(self._execute(job, "lease"), job, "lease")
        return len(jobs)

    async def _claim_held(self, queues: list[str], limit: int) -> int:
        claimed = 0
        for _ in range(limit):
            got: asyncio.Future[Job | None] = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._held_slot(queues, got))
            self._tasks.add(task)
            task.add_done_callback(self._finished)
            job = await got
            if job is None:
                break
            claimed += 1
        return claimed

    async def _held_slot(self, queues: list[str], got: asyncio.Future[Job | None]) -> None:
        assert self._pool is not None
        job: Job | None = None
        try:
            async with self._pool.connection() as conn, conn.transaction():
                jobs = await self.store.job_claim(
                    conn, queues, 1, self.worker_id, self.lease_seconds
                )
                job = jobs[0] if jobs else None
                got.set_result(job)
                if job is None or self._model_of(job) != "held":
                    pass  # commit the claim: a lease job runs outside the transaction
                else:
                    self._track(job, "held")
                    await self._execute_in(job, "held", conn)
                    return
            if job is not None:
                self._track(job, "lease")
                await self._execute_in(job, "lease", None)
        except Exception as exc:
            if not got.done():
                got.set_exception(exc)
            elif job is not None:
                log.error("held-lock job %s rolled back: %s", job.id, exc)

    def _start(self, coro: Any, job: Job, model: WorkerModel) -> None:
        self._track(job, model)
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _track(self, job: Job, model: WorkerModel) -> None:
        self.stats.claimed += 1
        self._running[job.id] = _Running(job, model)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wake.set()

    # -- running -------------------------------------------------------------------------

    async def _execute(self, job: Job, model: WorkerModel) -> None:
        await self._execute_in(job, model, None)

    async def _execute_in(
        self, job: Job, model: WorkerModel, conn: AsyncConnection[Any] | None
    ) -> None:
        task = self.app.tasks.get(job.task)
        unknown = None if task else UnknownTask(job.task, list(self.app.tasks))
        assert self._executor is not None
        try:
            outcome = await run_job(
                job,
                task,
                worker_id=self.worker_id,
                executor=self._executor,
                conn=conn,
                unknown=unknown,
            )
            await self._record(job, outcome, conn)
        except (psycopg.Error, SkiplockError) as exc:
            if conn is not None:
                raise  # the held transaction rolls back: the job is claimable again at once
            log.error(
                "job %s attempt %s: could not save its outcome (%s); it runs again once its "
                "lease expires",
                job.id,
                job.attempts,
                exc,
            )
        finally:
            self._running.pop(job.id, None)

    async def _record(self, job: Job, outcome: Outcome, conn: AsyncConnection[Any] | None) -> None:
        started = self._running[job.id].started
        if conn is not None:
            owned = await self._write_outcome(conn, job, outcome)
        else:
            assert self._pool is not None
            async with self._pool.connection() as pooled:
                owned = await self._write_outcome(pooled, job, outcome)
        duration_ms = (time.monotonic() - started) * 1000
        if not owned:
            self.stats.lost += 1
            log.warning(
                "job %s attempt %s: lease lost before the result was saved (the job was reclaimed);"
                " its %s outcome was discarded",
                job.id,
                job.attempts,
                outcome.kind,
            )
            return
        counter = _COUNTERS[outcome.kind]
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        log.info(
            "job %s task=%s attempt=%s/%s outcome=%s duration_ms=%.1f%s",
            job.id,
            job.task,
            job.attempts,
            job.max_attempts,
            outcome.kind,
            duration_ms,
            f" error={outcome.error.splitlines()[0]!r}" if outcome.error else "",
        )

    async def _write_outcome(self, conn: AsyncConnection[Any], job: Job, outcome: Outcome) -> bool:
        claim = job.claim
        if outcome.kind == "done":
            return job.id in await self.store.job_finish_many(conn, [claim], self.app.completion)
        if outcome.kind == "snooze":
            return job.id in await self.store.job_snooze_many(conn, [(claim, outcome.delay)])
        retry_in = outcome.delay if outcome.kind == "retry" else None
        assert outcome.error is not None
        return job.id in await self.store.job_fail_many(conn, [(claim, outcome.error, retry_in)])

    # -- background services -------------------------------------------------------------

    async def _heartbeat(self) -> None:
        assert self._pool is not None
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            leased = [r for r in self._running.values() if r.model == "lease" and not r.lost]
            if not leased:
                continue
            try:
                async with self._pool.connection() as conn:
                    kept = await self.store.job_extend_leases(
                        conn, [r.job.claim for r in leased], self.lease_seconds
                    )
            except (psycopg.Error, SkiplockError) as exc:
                log.warning("heartbeat failed: %s", exc)
                continue
            for r in leased:
                if r.job.id not in kept:
                    r.lost = True
                    log.warning(
                        "job %s attempt %s: lease lost (reclaimed by another worker)",
                        r.job.id,
                        r.job.attempts,
                    )

    async def _maintain(self) -> None:
        next_reclaim = 0.0
        while True:
            try:
                await self._promote()
                if time.monotonic() >= next_reclaim:
                    next_reclaim = time.monotonic() + min(self.lease_seconds / 2, 5.0)
                    assert self._pool is not None
                    async with self._pool.connection() as conn:
                        reclaimed = await self.store.job_reclaim_expired(conn)
                    if reclaimed:
                        self.stats.reclaimed += len(reclaimed)
                        log.warning(
                            "reclaimed %d jobs whose lease expired: %s", len(reclaimed), reclaimed
                        )
                        self._wake.set()
            except (psycopg.Error, SkiplockError) as exc:
                log.warning("maintenance failed: %s", exc)
            await asyncio.sleep(self.poll_interval)

    async def _promote(self) -> None:
        assert self._pool is not None
        async with self._pool.connection() as conn:
            if await self.store.job_promote_due(conn):
                self._wake.set()

    async def _listen(self, dsn: str, queues: set[str]) -> None:
        """Wake the claim loop on NOTIFY; a hint only, the poll is the guarantee."""
        backoff = 0.5
        while True:
            try:
                conn = await AsyncConnection.connect(dsn, **connect_kwargs(dsn))
                async with conn:
                    await conn.execute(self.app.queries["channel_listen"])
                    backoff = 0.5
                    self._wake.set()  # notifications may have been missed while disconnected
                    async for notify in conn.notifies():
                        if notify.payload in queues:
                            self._wake.set()
            except psycopg.Error as exc:
                log.warning("listener disconnected (%s); reconnecting in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
