"""Leased slots: the tasks that run a leasing worker's claimed jobs, one job after another.

A mixin of :class:`~skiplock.worker.Worker`.  A busy slot is an asyncio task that runs a
reserved job, then the next reserved one, for as long as the worker may start jobs.  When it may
not (nothing reserved, or too many outcomes still unwritten: see
:class:`~skiplock._runtime.capacity.Capacity`), the slot *parks*: it leaves the busy set and waits
for
the next job to be handed to it.  Starting a reserved job takes a parked slot before it makes a
new task: a task made and ended per start cost a worker of short jobs ~4 us each, a hand-over
~1.5 us, and a worker whose writes lag behind parks and wakes its slots once per write.

A job handed to a parked slot is started already (its ``started`` time is set and its
``task`` is the slot's task); if it is stopped before the slot gets its turn, the slot gives it
back without running it.  At shutdown the parked slots are let go.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from skiplock._runtime.capacity import Capacity
from skiplock._runtime.completer import Completer
from skiplock._runtime.execution import Outcome
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.running import RunningJob
from skiplock.job import Job

log = logging.getLogger("skiplock.worker")

# Busy slots together run jobs that do not await for at most this long before the event loop
# gets to its other work (claims, writes, the heartbeat): each slot's share is this divided by
# the number of busy slots, as the loop runs them one after the other; but at least
# SLOT_TURN_MIN, or a hundred slots would yield after every short job (1.5-2 us each).
SLOTS_TURN = 0.001
SLOT_TURN_MIN = 0.00005

ParkedSlot = tuple[asyncio.Task[None], "asyncio.Future[RunningJob | None]"]


class LeasedSlots:
    # Set by Worker.__init__ / Worker.run.
    lease_seconds: float
    capacity: Capacity
    settings: QueueSettings | None
    _completer: Completer | None
    _reserved: deque[RunningJob]
    _tasks: set[asyncio.Task[None]]  # the busy slots (held-lock slots too)
    _parked: deque[ParkedSlot]
    _handlers: int
    _stopping: bool
    _doubt_logged_at: float = -math.inf  # when the last "not starting job" line was logged

    if TYPE_CHECKING:  # defined by Worker, Claiming and JobOutcomes

        def _untrack(self, running: RunningJob) -> None: ...
        def _emit_started(self, job: Job) -> None: ...
        def _claim_if_due(self) -> None: ...
        def _capacity_freed(self) -> None: ...
        async def _outcome(self, running: RunningJob, conn: Any) -> Outcome: ...
        def _report_gone(self, running: RunningJob, outcome: Outcome) -> None: ...

    def _start_reserved(self) -> None:
        """Start reserved jobs in free slots: parked slots first, else a new task each."""
        assert self._completer is not None
        startable = self.capacity.startable(len(self._tasks), self._completer.pending)
        while startable > 0 and not self._stopping:
            running = self._next_reserved()
            if running is None:
                return
            running.task = self._slot_for(running)
            startable -= 1

    def _slot_for(self, running: RunningJob) -> asyncio.Task[None]:
        """Hand ``running`` to a parked slot, or make a slot for it; the slot is busy from now."""
        while self._parked:
            slot, handoff = self._parked.popleft()
            if not handoff.done():  # (a parked slot cancelled from outside is gone)
                handoff.set_result(running)
                self._tasks.add(slot)
                return slot
        slot = asyncio.create_task(self._run_slot(running))
        self._tasks.add(slot)
        slot.add_done_callback(self._slot_freed)
        return slot

    def _slot_freed(self, task: asyncio.Task[None]) -> None:
        """A slot's task ended (its job was stopped, or the worker is stopping)."""
        self._tasks.discard(task)
        self._capacity_freed()

    def _next_reserved(self) -> RunningJob | None:
        """The next reserved job, marked started; those cancelled by an admin or whose queue
        was paused while they waited for a slot are given back on the way, and so are those
        whose lease may be gone: no heartbeat has renewed it for two thirds of the lease (the
        database is out of reach, or the process was frozen), or one found it reclaimed.
        Started, such a job could run twice at once, here and wherever it was reclaimed."""
        assert self.settings is not None
        while self._reserved:
            running = self._reserved.popleft()
            if running.stop_reason is not None or running.job.queue in self.settings.paused:
                self._give_back(running)
                continue
            now = time.monotonic()
            if running.lease_until - now < self.lease_seconds / 3:
                self._lease_in_doubt(running, now)
                continue
            running.started = now
            self._emit_started(running.job)
            return running
        return None

    def _lease_in_doubt(self, running: RunningJob, now: float) -> None:
        """Give back a reserved job whose lease may be gone instead of starting it (the release
        is not written, and it is reported lost, when it is known reclaimed)."""
        if now >= self._doubt_logged_at + 5.0:  # one line per 5 s, not one per job
            self._doubt_logged_at = now
            reclaimed = running.claim_gone
            log.warning(
                "not starting job %s: %s; giving it back (and any other like it)",
                running.job.id,
                "its lease was found reclaimed"
                if reclaimed
                else "no heartbeat has renewed its lease lately",
            )
        self._give_back(running)

    def _give_back(self, running: RunningJob) -> None:
        """A claimed job that will not run here: cancelled if an admin said so, else released
        (back to the queue without spending its attempt)."""
        self._untrack(running)
        outcome = Outcome("cancelled") if running.stop_reason == "cancelled" else Outcome("release")
        self._submit(running, outcome)

    def _submit(self, running: RunningJob, outcome: Outcome) -> None:
        """Hand a leased job's outcome to the completer; reported lost, unwritten, when its
        claim is known to be gone (a heartbeat or a new claim here found it reclaimed)."""
        assert self._completer is not None
        if running.claim_gone:
            self._report_gone(running, outcome)
        else:
            self._completer.submit(running.job, outcome, running.started)

    async def _run_slot(self, running: RunningJob) -> None:
        """One slot: run this job, then the reserved ones, one after another, for as long as
        the slot may start them; then park until a job is handed over.  Between jobs the slot
        lets the event loop run its other work (claims, writes, other slots) once its turn is
        over (see ``SLOTS_TURN``).  Ends when a job of its was stopped, or at shutdown."""
        assert self._completer is not None
        slot = asyncio.current_task()
        assert slot is not None
        loop = asyncio.get_running_loop()
        while True:
            yield_at = time.monotonic() + self._slot_turn()
            while True:
                if not await self._run_leased(running):
                    return
                if time.monotonic() >= yield_at:
                    await asyncio.sleep(0)
                    yield_at = time.monotonic() + self._slot_turn()
                if self._stopping:
                    return
                # This slot is one of the busy ones: it may go on if one slot would be startable.
                if not self.capacity.startable(len(self._tasks) - 1, self._completer.pending):
                    break
                following = self._next_reserved()
                if following is None:
                    break
                self._claim_if_due()
                running = following
                running.task = slot
            handoff: asyncio.Future[RunningJob | None] = loop.create_future()
            self._tasks.discard(slot)
            self._parked.append((slot, handoff))
            self._capacity_freed()  # may hand a job straight back to this slot
            try:
                handed = await handoff
            except asyncio.CancelledError:
                handed = handoff.result() if handoff.done() and not handoff.cancelled() else None
                if handed is None or handed.stop_reason is None:
                    raise
                # Stopped between the hand-over and this slot's turn: it never started.
                self._give_back(handed)
                return
            if handed is None:
                return  # let go at shutdown
            running = handed

    def _release_parked_slots(self) -> list[asyncio.Task[None]]:
        """Let the parked slots end (at shutdown); returns their tasks."""
        slots = []
        while self._parked:
            slot, handoff = self._parked.popleft()
            if not handoff.done():
                handoff.set_result(None)
            slots.append(slot)
        return slots

    def _slot_turn(self) -> float:
        return max(SLOTS_TURN / max(len(self._tasks), 1), SLOT_TURN_MIN)

    async def _run_leased(self, running: RunningJob) -> bool:
        """Run one leased job and hand its outcome to the completer; False when it was stopped
        (cancelled, or at shutdown): the task it ran in is not to run another job."""
        self._handlers += 1
        go_on = True
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
            go_on = False
        finally:
            self._handlers -= 1
            # The slot's task goes on with other jobs: a late stop() of this one (a heartbeat
            # that asked before it finished) must not cancel them.
            running.task = None
            self._untrack(running)
        self._submit(running, outcome)
        return go_on
