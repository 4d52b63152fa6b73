"""Leased slots: the tasks that run a leasing worker's claimed jobs, one job after another.

A busy slot is an asyncio task that runs a reserved job, then the next reserved one, for as long
as the worker may start jobs.  When it may not (nothing reserved, or too many outcomes still
unwritten: see :class:`~skiplock._runtime.capacity.Capacity`), the slot *parks*: it leaves the
busy set and waits for the next job to be handed to it, which is cheaper than a task per job
(see docs/design.md, "Parked slots").

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
from collections.abc import Callable

import psycopg

from skiplock._runtime.capacity import Capacity
from skiplock._runtime.job_outcomes import OutcomeReporter
from skiplock._runtime.leased_claims import LeasedClaims
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.recycling import Recycling
from skiplock._runtime.running import RunningJob
from skiplock._runtime.worker_state import WorkerState

log = logging.getLogger("skiplock.worker")

# Busy slots together run jobs that do not await for at most this long before the event loop
# gets to its other work (claims, writes, the heartbeat): each slot's share is this divided by
# the number of busy slots, as the loop runs them one after the other; but at least
# SLOT_TURN_MIN, or a hundred slots would yield after every short job (see
# docs/design.md, "Parked slots").
SLOTS_TURN = 0.001
SLOT_TURN_MIN = 0.00005
# Seconds between two timings of the server's round trip, once a few are known (until then
# every claim times it: the first, on a connection just opened, is often slow).
ROUND_TRIP_EVERY = 5.0
# A skipped timing (no pooled connection free yet, as while the pool opens) is tried again this
# soon, not a whole ROUND_TRIP_EVERY later with the worker claiming without pieces meanwhile.
ROUND_TRIP_RETRY = 0.1
# The most a claim waits for a pooled connection to time the round trip on: it claims on a
# connection of its own, and the timing is skipped when the pool has none free meanwhile.
ROUND_TRIP_POOL_WAIT = 0.05

ParkedSlot = tuple[asyncio.Task[None], "asyncio.Future[RunningJob | None]"]


class LeasedSlots:
    """The leased implementation of :class:`~skiplock._runtime.slots.Slots`."""

    def __init__(
        self,
        state: WorkerState,
        claims: LeasedClaims,
        reporter: OutcomeReporter,
        capacity: Capacity,
        settings: QueueSettings,
        recycling: Recycling,
        *,
        lease_seconds: float,
        on_freed: Callable[[], None],
        on_taken: Callable[[], None],
    ) -> None:
        self.state = state
        self.claims = claims
        self.reporter = reporter
        self.completer = reporter.completer
        self.capacity = capacity
        self.settings = settings
        self.recycling = recycling
        self.lease_seconds = lease_seconds
        self.on_freed = on_freed  # a slot's job ended: start what waits, claim if due
        self.on_taken = on_taken  # a slot took a reserved job: claim if due
        self.parked: deque[ParkedSlot] = deque()  # the idle slots
        self.ahead = 0  # jobs started and queued behind their slot's current one
        state.reserved.weights = claims.turns.weights  # the reserve takes the claim's turns
        self._doubt_logged_at = -math.inf  # when the last "not starting job" line was logged
        self._next_round_trip = -math.inf  # when to time the server's round trip again

    def room(self, unwritten: int) -> int:
        state = self.state
        # A job queued ahead counts as a busy slot would: the claimed jobs stay as many.
        active = len(state.busy) + self.ahead
        return self.capacity.to_claim(active, len(state.reserved), unwritten)

    async def claim(self, queues: list[str], limit: int) -> int:
        """Claim up to ``limit`` jobs, reserve them, and start as many as slots are free."""
        state = self.state
        if time.monotonic() >= self._next_round_trip:  # what a claim's piece follows
            await self._time_round_trip()
        sent = time.monotonic()  # the leases run from the claim's commit, a little later
        jobs = await self.claims.claim(queues, limit, self._startable)
        self.recycling.count_claimed(len(jobs))
        lease_until = sent + self.lease_seconds
        for job in jobs:
            running = self.reporter.track(job, "lease")
            running.lease_until = lease_until
            state.reserved.append(running)
        self.start_waiting()
        return len(jobs)

    async def _time_round_trip(self) -> None:
        """Time the server's round trip for the claims' pieces.  Only a measurement: the claim
        runs on its own connection and needs none of the pool's, so a pool with no connection
        free, or an idle connection of it that died (the pool drops it when it comes back),
        skips this timing, not the claim (docs/design.md, "Claims in pieces")."""
        try:
            took = await self.claims.round_trip(ROUND_TRIP_POOL_WAIT)
        except psycopg.Error as exc:
            log.debug("round trip not timed: %s", exc)
            self._next_round_trip = time.monotonic() + ROUND_TRIP_RETRY
            return
        self.capacity.round_trip_took(took)
        if self.capacity.round_trips_known():
            self._next_round_trip = time.monotonic() + ROUND_TRIP_EVERY

    def _startable(self) -> int:
        """Jobs the slots could start now, none reserved for them."""
        state = self.state
        return self.capacity.concurrency - len(state.busy) - self.ahead - len(state.reserved)

    def give_back_waiting(self) -> None:
        reserved = self.state.reserved
        while reserved:  # never started: back to the queue without spending an attempt,
            self.reporter.give_back(reserved.popleft())  # or cancelled if an admin asked

    async def close(self) -> None:
        await self.claims.release()

    def start_waiting(self) -> None:
        """Start reserved jobs in free slots: parked slots first, else a new task each."""
        startable = self.capacity.startable(len(self.state.busy), self.completer.pending)
        while startable > 0 and not self.state.stopping:
            running = self._next_reserved()
            if running is None:
                return
            running.task = self._slot_for(running)
            startable -= 1

    def _slot_for(self, running: RunningJob) -> asyncio.Task[None]:
        """Hand ``running`` to a parked slot, or make a slot for it; the slot is busy from now."""
        while self.parked:
            slot, handoff = self.parked.popleft()
            if not handoff.done():  # (a parked slot cancelled from outside is gone)
                handoff.set_result(running)
                self.state.busy.add(slot)
                return slot
        slot = asyncio.create_task(self._run_slot(running))
        self.state.busy.add(slot)
        slot.add_done_callback(self._slot_freed)
        return slot

    def _slot_freed(self, task: asyncio.Task[None]) -> None:
        """A slot's task ended (its job was stopped, or the worker is stopping)."""
        self.state.busy.discard(task)
        self.on_freed()

    def _next_reserved(self) -> RunningJob | None:
        """The next reserved job, marked started; those cancelled by an admin or whose queue
        was paused while they waited for a slot are given back on the way, and so are those
        whose lease may be gone: no heartbeat has renewed it for two thirds of the lease (the
        database is out of reach, or the process was frozen), or one found it reclaimed.
        Started, such a job could run twice at once, here and wherever it was reclaimed."""
        while self.state.reserved:
            running = self.state.reserved.popleft()
            if running.stop_reason is not None or running.job.queue in self.settings.paused:
                self.reporter.give_back(running)
                continue
            now = time.monotonic()
            if running.lease_until - now < self.lease_seconds / 3:
                self._lease_in_doubt(running, now)
                continue
            running.started = now
            self.reporter.started(running.job)
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
        self.reporter.give_back(running)

    async def _run_slot(self, running: RunningJob) -> None:
        """One slot: run this job, then the reserved ones, one after another, for as long as
        the slot may start them; then park until a job is handed over.  Between jobs the slot
        lets the event loop run its other work (claims, writes, other slots) once its turn is
        over (see ``SLOTS_TURN``).  Ends when a job of its was stopped, or at shutdown."""
        slot = asyncio.current_task()
        assert slot is not None
        loop = asyncio.get_running_loop()
        ahead: list[RunningJob] = []  # the job queued behind the one the slot waits for

        def queue_next() -> None:
            """The slot's sync call is queued: while calls are short, start the next reserved
            job and queue its call behind it, so that a thread that returns from this one
            takes that one at once (see docs/design.md, "Sync tasks in batches")."""
            if ahead or self.state.stopping or not self.reporter.executor.short():
                return
            if not self.capacity.startable(len(self.state.busy) - 1, self.completer.pending):
                return
            following = self._next_reserved()
            if following is None:
                return
            self.ahead += 1
            self.on_taken()
            self.reporter.start_ahead(following)
            ahead.append(following)

        while True:
            yield_at = time.monotonic() + self._slot_turn()
            while True:
                go_on = await self.reporter.run_leased(running, queue_next)
                if ahead:
                    # Started already: its outcome is this slot's to record, whatever else.
                    running = ahead.pop()
                    self.ahead -= 1
                    running.task = slot
                    if not go_on or self.state.stopping:
                        await self._finish_ahead(running)
                        return
                    continue
                if not go_on:
                    return
                if time.monotonic() >= yield_at:
                    await asyncio.sleep(0)
                    yield_at = time.monotonic() + self._slot_turn()
                if self.state.stopping:
                    return
                # This slot is one of the busy ones: it may go on if one slot would be startable.
                if not self.capacity.startable(len(self.state.busy) - 1, self.completer.pending):
                    break
                following = self._next_reserved()
                if following is None:
                    break
                self.on_taken()
                running = following
                running.task = slot
            handoff: asyncio.Future[RunningJob | None] = loop.create_future()
            self.state.busy.discard(slot)
            self.parked.append((slot, handoff))
            self.on_freed()  # may hand a job straight back to this slot
            try:
                handed = await handoff
            except asyncio.CancelledError:
                handed = handoff.result() if handoff.done() and not handoff.cancelled() else None
                if handed is None or handed.stop_reason is None:
                    raise
                # Stopped between the hand-over and this slot's turn: it never started.
                self.reporter.give_back(handed)
                return
            if handed is None:
                return  # let go at shutdown
            running = handed

    async def _finish_ahead(self, running: RunningJob) -> None:
        """The slot ends with a job queued ahead: one whose call no thread has taken is given
        back (it never ran); one that ran, or runs, is waited for and recorded."""
        call = running.ahead
        if call is not None and self.reporter.executor.drop(call):
            if running.ahead_timer is not None:
                running.ahead_timer.cancel()
            running.task = None
            self.reporter.give_back(running)
            return
        await self.reporter.run_leased(running)

    def let_go_idle(self) -> list[asyncio.Task[None]]:
        """Let the parked slots end (at shutdown); returns their tasks."""
        slots = []
        while self.parked:
            slot, handoff = self.parked.popleft()
            if not handoff.done():
                handoff.set_result(None)
            slots.append(slot)
        return slots

    def _slot_turn(self) -> float:
        return max(SLOTS_TURN / max(len(self.state.busy), 1), SLOT_TURN_MIN)
