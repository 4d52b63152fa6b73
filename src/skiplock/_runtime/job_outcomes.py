"""What became of a worker's jobs: each claimed job's task run to an
:class:`~skiplock._runtime.execution.Outcome`, the outcome handed to the
:class:`~skiplock._runtime.completer.Completer` (or reported lost when its claim is gone), and the
outcomes written counted in the worker's stats and told to the log and the event listeners.

Both kinds of slots run and report their jobs through one :class:`OutcomeReporter`; what frees
slots and prompts claims is the claim loop's business, told through ``on_recorded``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from psycopg import AsyncConnection

from skiplock._db.store_async import AsyncStore
from skiplock._runtime.completer import Completer, Recorded
from skiplock._runtime.execution import Outcome, run_job, start_ahead, unrunnable
from skiplock._runtime.running import RunningJob
from skiplock._runtime.task_threads import TaskThreads
from skiplock._runtime.thread_calls import DROPPED
from skiplock._runtime.worker_state import WorkerState
from skiplock._task_settings import WorkerModel
from skiplock.app import App
from skiplock.backends.base import Backend
from skiplock.errors import UnknownTask
from skiplock.events import JobEvent, WorkerStats, finished_level, log_event
from skiplock.job import Job, UnrunnableJob

log = logging.getLogger("skiplock.worker")


class OutcomeReporter:
    def __init__(
        self,
        app: App,
        store: AsyncStore,
        backend: Backend,
        state: WorkerState,
        *,
        worker_id: str,
        stats: WorkerStats,
        listeners: list[Callable[[JobEvent], None]],
        executor: TaskThreads,
        on_recorded: Callable[[list[Recorded]], None],
    ) -> None:
        self.app = app
        self.state = state
        self.worker_id = worker_id
        self.stats = stats
        self.listeners = listeners
        self.executor = executor
        self.on_recorded = on_recorded  # after the outcomes are counted and told
        self.completer: Completer = Completer(
            store,
            backend,
            app.completion,
            on_recorded=self.recorded,
            still_running=lambda: state.handlers,
        )

    def track(self, job: Job, model: WorkerModel) -> RunningJob:
        """A job just claimed: counted, and registered as the worker's."""
        self.stats.claimed += 1
        return self.state.track(job, model)

    def started(self, job: Job) -> None:
        if self.listeners or log.isEnabledFor(logging.DEBUG):
            self._emit(JobEvent("started", job, self.worker_id))

    async def outcome(
        self,
        running: RunningJob,
        conn: AsyncConnection[Any] | None,
        then: Callable[[], None] | None = None,
    ) -> Outcome:
        """Run the job's task (on ``conn``, a held-lock job's transaction) to its outcome;
        ``then``, once a sync task's call is queued (see :func:`run_job`)."""
        job = running.job
        if isinstance(job, UnrunnableJob):
            return unrunnable(job)
        task = self.app.tasks.get(job.task)
        unknown = None if task else UnknownTask(job.task, list(self.app.tasks))
        outcome = await run_job(
            job, task, worker_id=self.worker_id, executor=self.executor, conn=conn,
            unknown=unknown, cancel_flag=lambda: running.cancel_flag,
            progress_slot=lambda: running.progress_slot, ahead=running.ahead, then=then,
        )  # fmt: skip
        self.stats.timed_out += outcome.timed_out
        return outcome

    def start_ahead(self, running: RunningJob) -> None:
        """Queue a started leased job's sync call behind the one its slot waits for (see
        LeasedSlots); it stays the ordinary way when it cannot (see :func:`start_ahead`).
        Until its slot waits for it, a timer keeps its timeout (see ``_ahead_overdue``)."""
        job = running.job
        if isinstance(job, UnrunnableJob):
            return
        task = self.app.tasks.get(job.task)
        if task is None:
            return
        running.ahead = start_ahead(
            job, task, worker_id=self.worker_id, executor=self.executor,
            cancel_flag=lambda: running.cancel_flag, progress_slot=lambda: running.progress_slot,
        )  # fmt: skip
        if running.ahead is None:
            return
        running.ahead_drop = self.executor.drop  # a stop drops it (see RunningJob.stop)
        timeout = task.settings.timeout
        if timeout is not None:
            loop = asyncio.get_running_loop()
            running.ahead_timer = loop.call_later(timeout, self._ahead_overdue, running, timeout)

    def _ahead_overdue(self, running: RunningJob, timeout: float) -> None:
        """A queued-ahead call's timeout, while its slot still waits for the one before: a call
        that has run for its timeout is told (``ctx.cancelled``) and keeps its thread, another
        taking its place, as at a timeout; its slot then records the timeout."""
        call = running.ahead
        running.ahead_timer = None
        if call is None or call.returned or call.state == DROPPED or call.kept:
            return
        began = call.began
        left = timeout if began is None else timeout - (time.monotonic() - began)
        if left > 0:  # not begun (it cannot have overrun yet), or not for long enough
            loop = asyncio.get_running_loop()
            running.ahead_timer = loop.call_later(left, self._ahead_overdue, running, timeout)
            return
        running.cancel_flag.set()
        self.executor.keep(call, running.job.id)

    async def run_leased(self, running: RunningJob, then: Callable[[], None] | None = None) -> bool:
        """Run one leased job and hand its outcome to the completer; False when it was stopped
        (cancelled, or at shutdown): the task it ran in is not to run another job.  ``then``:
        called once a sync task's call is queued (the slot may queue its next behind it)."""
        state = self.state
        state.handlers += 1
        go_on = True
        if running.ahead_timer is not None:
            running.ahead_timer.cancel()  # its wait's own timeout from here
            running.ahead_timer = None
        try:
            reason = running.stop_reason
            if reason is not None:
                # Stopped while its slot took it behind the one it waited for (nothing cancelled
                # the slot): it does not run, and a sync call that runs keeps its thread.
                if running.ahead is not None:
                    self.executor.keep(running.ahead, running.job.id)
                outcome = Outcome("cancelled" if reason == "cancelled" else "release")
                go_on = False
            else:
                outcome = await self.outcome(running, None, then)
        except asyncio.CancelledError:
            reason = running.stop_reason
            if reason is None:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            outcome = Outcome("cancelled" if reason == "cancelled" else "release")
            go_on = False
        finally:
            state.handlers -= 1
            # The slot's task goes on with other jobs: a late stop() of this one (a heartbeat
            # that asked before it finished) must not cancel them.
            running.task = None
            state.untrack(running)
        self.submit(running, outcome)
        return go_on

    def give_back(self, running: RunningJob) -> None:
        """A claimed job that will not run here: cancelled if an admin said so, else released
        (back to the queue without spending its attempt)."""
        self.state.untrack(running)
        outcome = Outcome("cancelled") if running.stop_reason == "cancelled" else Outcome("release")
        self.submit(running, outcome)

    def submit(self, running: RunningJob, outcome: Outcome) -> None:
        """Hand a leased job's outcome to the completer; reported lost, unwritten, when its
        claim is known to be gone (a heartbeat or a new claim here found it reclaimed)."""
        if running.claim_gone:
            self.report_gone(running, outcome)
        else:
            self.completer.submit(running.job, outcome, running.started)

    def report_gone(self, running: RunningJob, outcome: Outcome) -> None:
        """The outcome of a claim known to be gone (``RunningJob.claim_gone``): not written,
        as the write could only be refused; reported lost, as a refused write is, once the
        event loop gets to it."""
        record = Recorded(running.job, outcome, False, running.started)
        asyncio.get_running_loop().call_soon(self.recorded, [record])

    def recorded(self, batch: list[Recorded]) -> None:
        """Outcomes were written (or found lost): count and report them, then tell the claim
        loop."""
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
        self.on_recorded(batch)

    def _emit(self, event: JobEvent) -> None:
        """Log the event and tell each listener in turn: one that fails is logged, the others
        still hear of it."""
        log_event(event)
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                log.exception("job event listener %r failed", listener)
