"""What became of a worker's jobs: each claimed job tracked while it is the worker's, its
task run to an :class:`~skiplock._runtime.execution.Outcome`, and the outcomes the
:class:`~skiplock._runtime.completer.Completer` wrote reported: counted in the worker's stats, told
to
the log and the app's event listeners, and turned into free slots and new claims.

A mixin of :class:`~skiplock.worker.Worker`, like :mod:`skiplock._runtime.claiming` and the slots.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from skiplock._runtime.capacity import Capacity
from skiplock._runtime.claim_cursor import ClaimCursor
from skiplock._runtime.completer import Recorded
from skiplock._runtime.execution import Outcome, run_job, unrunnable
from skiplock._runtime.recycling import Recycling
from skiplock._runtime.running import RunningJob
from skiplock._runtime.task_threads import TaskThreads
from skiplock.app import App
from skiplock.errors import UnknownTask
from skiplock.events import JobEvent, WorkerStats, finished_level, log_event
from skiplock.job import Job, UnrunnableJob
from skiplock.task import WorkerModel

log = logging.getLogger("skiplock.worker")

REQUEUED = ("retry", "snooze")  # outcomes that can make their job claimable again at once


class JobOutcomes:
    # Set by Worker.__init__ / Worker.run.
    app: App
    worker_id: str
    stats: WorkerStats
    listeners: list[Callable[[JobEvent], None]]
    capacity: Capacity
    claim_cursor: ClaimCursor
    recycling: Recycling
    _running: dict[int, RunningJob]
    _executor: TaskThreads | None
    _drained: bool

    if TYPE_CHECKING:  # defined by Worker and Claiming

        def _nudge(self) -> None: ...
        def _capacity_freed(self) -> None: ...

    def _track(self, job: Job, model: WorkerModel) -> RunningJob:
        self.stats.claimed += 1
        running = RunningJob(job, model)
        earlier = self._running.get(job.id)
        if earlier is not None:  # claimed again while an earlier claim of it runs here: that
            if earlier.model == "held":  # one's session ended (its row lock went with it),
                earlier.session_ended()
            else:  # or its lease ran out and this worker reclaimed it
                earlier.lease_lost()
        self._running[job.id] = running
        return running

    def _emit_started(self, job: Job) -> None:
        if self.listeners or log.isEnabledFor(logging.DEBUG):
            self._emit(JobEvent("started", job, self.worker_id))

    def _untrack(self, running: RunningJob) -> None:
        # Only this claim's entry: the job may have been claimed again meanwhile (its lease ran
        # out while it ran here, and this worker reclaimed and re-claimed it).  Popping by id
        # would drop the new claim, which no heartbeat would then renew.
        if self._running.get(running.job.id) is running:
            del self._running[running.job.id]

    def _report_gone(self, running: RunningJob, outcome: Outcome) -> None:
        """The outcome of a claim known to be gone (``RunningJob.claim_gone``): not written,
        as the write could only be refused; reported lost, as a refused write is, once the
        event loop gets to it."""
        record = Recorded(running.job, outcome, False, running.started)
        asyncio.get_running_loop().call_soon(self._recorded, [record])

    async def _outcome(self, running: RunningJob, conn: AsyncConnection[Any] | None) -> Outcome:
        job = running.job
        if isinstance(job, UnrunnableJob):
            return unrunnable(job)
        task = self.app.tasks.get(job.task)
        unknown = None if task else UnknownTask(job.task, list(self.app.tasks))
        assert self._executor is not None
        outcome = await run_job(
            job, task, worker_id=self.worker_id, executor=self._executor, conn=conn,
            unknown=unknown, cancel_flag=lambda: running.cancel_flag,
        )  # fmt: skip
        self.stats.timed_out += outcome.timed_out
        return outcome

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
            if self.listeners or log.isEnabledFor(finished_level(kind)):
                duration = now - recorded.started
                event = JobEvent("finished", job, self.worker_id, kind, duration, outcome.error)
                self._emit(event)
        self.capacity.throughput.add(len(batch))
        if any(r.job.entity_key is not None or r.outcome.kind in REQUEUED for r in batch):
            # The next job with that key, skipped by the last claim, or a job put back to run
            # again, may be claimable now, behind the claim cursor.
            self._drained = False
            self.claim_cursor.rescan()
        if self.capacity.max_in_flight is not None and not self._drained:
            self._nudge()  # only written outcomes make room under the bound
        if self.recycling.reason is not None:
            self._nudge()  # it may be the last job this recycled worker waited for
        self._capacity_freed()

    def _emit(self, event: JobEvent) -> None:
        """Log the event and tell each listener in turn: one that fails is logged, the others
        still hear of it."""
        log_event(event)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                log.exception("job event listener %r failed", listener)
