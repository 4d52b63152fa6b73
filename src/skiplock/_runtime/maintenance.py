"""Maintenance that one worker runs for everybody (the leader): promote due scheduled jobs, age the
pending jobs of queues with aging, cancel jobs past their expiry, release (or cancel) jobs
waiting for others, prune finished jobs and archived ones past their retention (and workers gone
for an hour), keep the archive's daily partitions when it has them, reclaim expired leases.
Reclaiming is also done by every other worker, so that the death of the leader itself does not
hold up the recovery of its jobs.  Periodic ticks are enqueued by every worker that serves the
periodic task's queue, leader or not (the ticks table makes each tick one job), and by no other:
a worker never makes jobs that it may be the only one around to ignore.  Ticks fall by the
database server's clock.  A worker that starts leading first reconciles the periodic schedules
of the app with the ticks recorded: those of schedules removed or changed in code are dropped,
their queued jobs cancelled, and the leader says so in its log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from skiplock._db.enqueue import EnqueueOptions
from skiplock._db.presence import GONE_AFTER
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.leader import LeaderElector
from skiplock._runtime.periodic import PeriodicTask, ServerClock
from skiplock.app import App
from skiplock.backends.base import Backend
from skiplock.errors import SkiplockError

log = logging.getLogger("skiplock._runtime.maintenance")

RELEASE_BATCH = 1000  # waiting jobs read by one statement
AGING_BATCH = 1000  # pending jobs given a better priority by one round at most (aging)
RELEASE_ROUNDS = 5  # statements a round at most, while they cancel jobs (chains of dependents)
# While jobs wait for others, the leader looks for the ones it can release this often between
# its rounds: a chain of jobs moves on a step per interval at most.
WAITING_RELEASE_INTERVAL = 0.1
# Between its rounds the leader sleeps until the next scheduled job is due (job_next_due), and
# reads that time again this often, for jobs scheduled (or retries due) sooner than it knew:
# one index probe.  A job due this soon after it was scheduled may start this much late; any
# other starts within the claim latency of its run_at (bench/README.md, "Due work").
DUE_LOOK_INTERVAL = 0.1


@dataclass
class MaintenanceStats:
    promoted: int = 0
    aged: int = 0
    released: int = 0
    dependents_cancelled: int = 0
    expired: int = 0
    reclaimed: int = 0
    pruned: int = 0
    periodic_enqueued: int = 0
    runs: int = 0
    errors: int = 0


class Maintenance:
    def __init__(
        self,
        app: App,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        elector: LeaderElector,
        *,
        interval: float = 1.0,
        reclaim_interval: float = 5.0,
        prune_interval: float = 60.0,
        on_work: Callable[[], None] = lambda: None,
        queues: Collection[str] | None = None,
        backend: Backend | None = None,
    ) -> None:
        """``queues``: those the worker serves (None: every one), whose periodic tasks it
        enqueues.  ``backend``: where expired leases are reclaimed (the app's by default);
        the rest is PostgreSQL's upkeep, on ``store``."""
        self.app = app
        self.backend: Backend = backend or app.backend
        self.store = store
        self.pool = pool
        self.elector = elector
        self.interval = interval
        self.reclaim_interval = reclaim_interval
        self.prune_interval = prune_interval
        self.on_work = on_work
        self.stats: MaintenanceStats = MaintenanceStats()
        self._next_reclaim = 0.0
        self._next_prune = 0.0
        self._strangers: set[tuple[int, str, str, str, bool]] = set()  # see _report_strangers
        # The queues whose held-lock markers _report_strangers looks for, besides those of the
        # schema's queues table and held-lock sessions: the served ones, or every task's.
        self._marker_queues = sorted(
            queues if queues is not None else {t.queue for t in app.tasks.values()}
        )
        self._waiting_after = 0  # where the next read of waiting jobs starts (release_waiting)
        self._jobs_waiting = False  # whether the last read found any
        self._next_due: float | None = None  # monotonic time the next scheduled job is due
        self.periodic: list[PeriodicTask] = [
            p
            for p in app.periodic_tasks.values()
            if queues is None or app.get_task(p.task).queue in queues
        ]
        self._ticks_handled: dict[str, datetime] = {}  # the latest tick of each, once recorded
        self.clock: ServerClock = ServerClock()
        self._started: datetime | None = None  # the first reading of the server's clock
        self._reconciled = False  # the app's schedules against the recorded ticks, once
        # What makes each periodic task's ticks, recorded with them (periodic_reconcile).
        self._definitions = {
            p.name: p.definition(app.get_task(p.task).queue) for p in app.periodic_tasks.values()
        }
        others = [p for p in app.periodic_tasks.values() if p not in self.periodic]
        if others:
            # If no worker serves their queues, these never run: say so where it shows.
            log.info(
                "periodic tasks not enqueued by this worker, which does not serve their "
                "queues (a worker that does enqueues them): %s",
                ", ".join(f"{p.name} (queue {app.get_task(p.task).queue})" for p in others),
            )

    async def run(self) -> None:
        while True:
            if self.elector.is_leader:
                if not self._reconciled:
                    await self._run_step("reconcile", self._reconcile)
                await self.run_once()
            else:
                await self.reclaim_if_due()
                if self.periodic and self.clock.stale():
                    await self._run_step("clock", self._read_clock)
                if self._periodic_due():
                    await self._run_step("periodic", self._enqueue_periodic)
            await self._until_next_round()

    async def _until_next_round(self) -> None:
        """Sleep for the interval.  A leader meanwhile promotes scheduled jobs as they fall
        due (it sleeps until the next one's run_at, reading it again every
        DUE_LOOK_INTERVAL), and, while jobs wait for others, reads them every
        WAITING_RELEASE_INTERVAL, so that each is released soon after what it waits for is
        done."""
        next_round = time.monotonic() + self.interval
        next_release = time.monotonic() + WAITING_RELEASE_INTERVAL
        while self.elector.is_leader:
            now = time.monotonic()
            wake = min(next_round, now + DUE_LOOK_INTERVAL)
            if self._next_due is not None:
                wake = min(wake, self._next_due)
            if self._jobs_waiting:
                wake = min(wake, next_release)
            if wake >= next_round:
                break
            await asyncio.sleep(max(0.0, wake - now))
            # A step that fails (logged) waits for the next round: no warning every 0.1 s.
            if self._jobs_waiting and time.monotonic() >= next_release:
                next_release = time.monotonic() + WAITING_RELEASE_INTERVAL
                if not await self._run_step("release", self._release_waiting):
                    break
            if self._next_due is not None and time.monotonic() >= self._next_due:
                if not await self._run_step("promote", self._promote):
                    break
            elif not await self._run_step("next due", self._read_next_due):
                break
        if self.elector.is_leader:
            await asyncio.sleep(max(0.0, next_round - time.monotonic()))
            return
        # A worker that becomes the leader meanwhile starts its round at once.
        self.elector.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self.elector.changed.wait(), max(0.0, next_round - time.monotonic())
            )

    async def reclaim_if_due(self) -> None:
        """Every worker, leader or not, reclaims expired leases at the reclaim interval: the
        statement is safe to run concurrently, and a dead leader must not delay recovery."""
        now = time.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + self.reclaim_interval
        await self._reclaim_logged()

    async def _reclaim_logged(self) -> None:
        try:
            await self._reclaim_expired()
        except (psycopg.Error, SkiplockError) as exc:
            self.stats.errors += 1
            log.warning("reclaim failed, retrying next round: %s", exc)

    async def run_once(self, *, force: bool = False) -> None:
        """One round; ``force`` runs the reclaim and prune whatever their intervals say.  Each
        step stands alone: one failing (logged, retried next round) does not stop the others."""
        now = time.monotonic()
        self.stats.runs += 1
        steps: list[tuple[str, Callable[[AsyncConnection[Any]], Awaitable[None]]]] = [
            ("promote", self._promote),
            ("age", self._age),
            ("expire", self._cancel_expired),
            ("release", self._release_waiting),
            ("periodic", self._enqueue_periodic),
        ]
        later: list[tuple[str, Callable[[AsyncConnection[Any]], Awaitable[None]]]] = []
        reclaim = force or now >= self._next_reclaim
        if reclaim:
            self._next_reclaim = now + self.reclaim_interval
            later.append(("locks", self._report_strangers))
        if force or now >= self._next_prune:
            self._next_prune = now + self.prune_interval
            later.append(("prune", self._prune))
        for name, step in steps:
            await self._run_step(name, step)
        if reclaim:  # through the backend, holding no connection of a step meanwhile
            await self._reclaim_logged()
        for name, step in later:
            await self._run_step(name, step)

    async def _run_step(
        self, name: str, step: Callable[[AsyncConnection[Any]], Awaitable[None]]
    ) -> bool:
        """Run one step; False when it failed (logged)."""
        try:
            async with self.pool.connection() as conn:
                await step(conn)
        except (psycopg.Error, SkiplockError) as exc:
            self.stats.errors += 1
            log.warning("maintenance step %s failed, retrying next round: %s", name, exc)
            return False
        return True

    async def _promote(self, conn: AsyncConnection[Any]) -> None:
        """Promote every due scheduled job, then note when the next one is due."""
        self._next_due = None
        promoted = await self.store.job_promote_due(conn)
        if promoted:
            self.stats.promoted += sum(promoted.values())
            self.on_work()
        await self._read_next_due(conn, promoted=True)

    async def _age(self, conn: AsyncConnection[Any]) -> None:
        """Give the jobs of queues with aging the priority their wait has earned, a batch a
        round (one statement that reads the settings only, when no queue ages)."""
        aged = await self.store.job_age_pending(conn, AGING_BATCH)
        if aged:
            self.stats.aged += sum(aged.values())
            log.debug("aged %d pending jobs: %s", sum(aged.values()), aged)

    async def _read_next_due(self, conn: AsyncConnection[Any], *, promoted: bool = False) -> None:
        """When (on this process's monotonic clock) the next scheduled job is due, read on
        the server's clock, by which promotion compares; a ms late rather than early.  One
        still due just after a promotion is locked by another transaction (which skipped
        it): looked at again after DUE_LOOK_INTERVAL, not in a busy loop."""
        seconds, waiting = await self.store.job_next_due(conn)
        # A job made to wait since the last release read: read again between rounds.
        self._jobs_waiting = self._jobs_waiting or waiting
        if seconds is None:
            self._next_due = None
        elif promoted and seconds <= 0:
            self._next_due = time.monotonic() + DUE_LOOK_INTERVAL
        else:
            self._next_due = time.monotonic() + max(seconds, 0) + 0.001

    async def _cancel_expired(self, conn: AsyncConnection[Any]) -> None:
        expired = await self.store.job_cancel_expired(conn)
        if expired:
            self.stats.expired += sum(expired.values())
            log.info(
                "cancelled %d jobs not started by their expiry: %s", sum(expired.values()), expired
            )

    async def _release_waiting(self, conn: AsyncConnection[Any]) -> None:
        """Release the waiting jobs whose dependencies are done, cancel those with a failed
        one: a batch a round, each from where the last stopped, so that every waiting job is
        read in turn however many wait.  A cancellation may end the wait of jobs depending on
        the cancelled job: read again at once, a few times, so a chain is cancelled together."""
        for _ in range(RELEASE_ROUNDS):
            done = await self.store.job_release_waiting(conn, self._waiting_after, RELEASE_BATCH)
            self._waiting_after = done.last_id or 0 if done.read >= RELEASE_BATCH else 0
            released, cancelled = sum(done.released.values()), sum(done.cancelled.values())
            # Some still wait: the read left some, or stopped at its batch before the end.
            self._jobs_waiting = done.read > released + cancelled or bool(self._waiting_after)
            self.stats.released += released
            self.stats.dependents_cancelled += cancelled
            if released:
                self.on_work()
            if cancelled:
                log.warning(
                    "cancelled %d jobs whose dependencies failed or were cancelled: %s",
                    cancelled,
                    done.cancelled,
                )
            else:
                return

    async def _reclaim_expired(self) -> None:
        reclaimed = await self.backend.reclaim_expired()
        if reclaimed:
            self.stats.reclaimed += len(reclaimed)
            log.warning("reclaimed %d jobs whose lease expired: %s", len(reclaimed), reclaimed)
            self.on_work()

    async def _read_clock(self, conn: AsyncConnection[Any]) -> None:
        sent = time.monotonic()
        server_now = await self.store.clock_read(conn)
        self.clock.record(server_now, sent, time.monotonic())
        if self._started is None:
            self._started = server_now

    async def _reconcile(self, conn: AsyncConnection[Any]) -> None:
        """Drop the recorded ticks of periodic schedules the app no longer defines (of its own
        tasks: apps sharing a schema may define different ones), or defines otherwise, and
        cancel their queued jobs; say which.  Ticks that fell since this worker
        started are left: another worker still running (another version of the app, in a
        rolling deploy) makes them, and will again."""
        if self._started is None:
            await self._read_clock(conn)
        assert self._started is not None
        dropped = await self.store.periodic_reconcile(
            conn, self._definitions, self._started, list(self.app.tasks)
        )
        self._reconciled = True
        for schedule in dropped:
            # A changed schedule's tick found recorded (by its old definition) is due again.
            self._ticks_handled.pop(schedule.name, None)
            log.warning(
                "periodic schedule %s: %s: dropped %d recorded ticks and cancelled %d queued "
                "jobs %s",
                schedule.name,
                "its definition changed" if schedule.changed else "no longer defined by the app",
                schedule.ticks,
                len(schedule.cancelled),
                schedule.cancelled,
            )

    def _periodic_due(self) -> list[tuple[PeriodicTask, datetime]]:
        """The ticks of this worker's periodic tasks to enqueue now by the server's clock
        (none before it is read), but those it has already recorded (or found recorded by
        another worker)."""
        now = self.clock.now()
        if now is None:
            return []
        due = []
        for periodic in self.periodic:
            handled = self._ticks_handled.get(periodic.name)
            for tick in periodic.schedule.ticks_due(now):
                if handled is None or tick > handled:
                    due.append((periodic, tick))
        return due

    async def _enqueue_periodic(self, conn: AsyncConnection[Any]) -> None:
        if self.periodic and self.clock.stale():
            await self._read_clock(conn)
        for periodic, tick in self._periodic_due():
            job = self.app.build_jobs(periodic.task, [periodic.payload], EnqueueOptions())
            job_id = await self.store.periodic_enqueue_tick(
                conn, periodic.name, tick, job, self._definitions[periodic.name]
            )
            self._ticks_handled[periodic.name] = tick
            if job_id is not None:
                self.stats.periodic_enqueued += 1
                log.info("periodic %s: enqueued job %s for tick %s", periodic.name, job_id, tick)

    async def _report_strangers(self, conn: AsyncConnection[Any]) -> None:
        """Log each session that holds one of skiplock's advisory keys without being a worker
        (nothing waits on it, nor is counted by it, but workers of the last version count the
        held-lock markers; see docs/security.md) once when it is first seen, and once when it
        has let go."""
        now = set(await self.store.session_list_lock_strangers(conn, self._marker_queues))
        for pid, user, what, mode, granted in sorted(now - self._strangers):
            log.warning(
                "session %s (%s), which may not write the jobs table, %s %s (%s): claims do "
                "not wait for it, but workers of earlier skiplock versions miscount the jobs "
                "it names; `skiplock doctor` reports it",
                pid,
                user,
                "holds" if granted else "waits for",
                what,
                mode,
            )
        for pid, _, what, _, _ in sorted(self._strangers - now):
            log.warning("session %s no longer holds %s", pid, what)
        self._strangers = now

    async def _prune(self, conn: AsyncConnection[Any]) -> None:
        hot = {s: v for s, v in self.app.retention.items() if s != "archive"}
        pruned = await self.store.job_prune_by_retention(conn, hot)
        self.stats.pruned += sum(pruned.values())
        archive = await self.store.archive_prune(conn, self.app.retention.get("archive"))
        self.stats.pruned += archive.deleted
        if archive.partitions.created or archive.partitions.dropped:
            log.info(
                "archive partitions: created %s, dropped %s (past the retention)",
                archive.partitions.created or "none",
                archive.partitions.dropped or "none",
            )
        await self.store.job_held_starts_prune(conn)
        await self.store.job_progress_prune(conn)
        await self.store.session_prune_held_runs(conn)
        await self.store.job_finished_counts_prune(conn)
        await self.store.job_finished_counts_merge(conn)
        await self.store.job_dependencies_prune(conn)
        await self.store.presence_prune_gone(conn, GONE_AFTER)
        if self.app.periodic_tasks:
            await self.store.periodic_prune_ticks(conn)
