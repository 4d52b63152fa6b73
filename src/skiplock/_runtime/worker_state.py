"""What a worker's services share: the jobs it has claimed, its busy slots, whether it stops.

One small object passed to the claim loop, the slots and the outcome reporter, so that each
reads the same registry instead of keeping a copy; the heartbeat, the presence report and the
held-lock watchers read it through :meth:`WorkerState.jobs`.
"""

from __future__ import annotations

import asyncio

from skiplock._runtime.reserve import Reserve
from skiplock._runtime.running import RunningJob
from skiplock._task_settings import WorkerModel
from skiplock.job import Job


class WorkerState:
    def __init__(self) -> None:
        self.running: dict[int, RunningJob] = {}  # every claimed job, reserved or started
        self.reserved = Reserve()  # claimed, waiting for a slot (in the order they start)
        self.busy: set[asyncio.Task[None]] = set()  # the busy slots (held-lock slots too)
        self.handlers = 0  # jobs whose task is running now (their outcomes are still to come)
        self.stopping = False  # stop claiming and starting (Worker.stop)

    def jobs(self) -> list[RunningJob]:
        """Every job this worker has claimed and not finished with, reserved or started."""
        return list(self.running.values())

    def track(self, job: Job, model: WorkerModel) -> RunningJob:
        """Register a job just claimed; an earlier claim of it running here is gone."""
        running = RunningJob(job, model)
        earlier = self.running.get(job.id)
        if earlier is not None:  # claimed again while an earlier claim of it runs here: that
            if earlier.model == "held":  # one's session ended (its row lock went with it),
                earlier.session_ended()
            else:  # or its lease ran out and this worker reclaimed it
                earlier.lease_lost()
        self.running[job.id] = running
        return running

    def untrack(self, running: RunningJob) -> None:
        # Only this claim's entry: the job may have been claimed again meanwhile (its lease ran
        # out while it ran here, and this worker reclaimed and re-claimed it).  Popping by id
        # would drop the new claim, which no heartbeat would then renew.
        if self.running.get(running.job.id) is running:
            del self.running[running.job.id]

    def cancel_requested(self, job_id: int) -> None:
        """An admin asked by NOTIFY to cancel a job whose row another session had locked (a
        held-lock job's row, locked by the transaction it runs in, cannot take the flag a
        leased job's heartbeat reads).  If it runs here, it is stopped: a held-lock job's
        outcome, cancelled, commits in its transaction, and what its task wrote on
        ``ctx.conn`` rolls back; a leased job ends as if its heartbeat had seen the flag.  (A
        held-lock job not started yet reads the request, recorded apart, at its start; see
        :mod:`skiplock._runtime.held_cancels`.)"""
        running = self.running.get(job_id)
        if running is not None:
            running.cancel_requested()
