"""When a worker claims, and how many jobs: the claim loop.

It asks the slots (:class:`~skiplock._runtime.slots.Slots`) how many jobs they have room for,
caps that by the worker's recycling share, and has them claim.  After a claim that came up short
the worker does not go back to the queues when a slot frees, only when new work is announced (a
NOTIFY, a promotion, a resumed queue) or at the next poll; claims that keep coming back empty
are spaced so that a flood of NOTIFYs cannot drive them.

Producers notify a queue only while a worker of it is idle: after a claim that came up short
the loop has its listener mark the worker idle, after a full one busy (docs/design.md,
"Notifications only to idle workers").
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Protocol

import psycopg

from skiplock._runtime.capacity import Capacity
from skiplock._runtime.claim_cursor import ClaimCursor
from skiplock._runtime.completer import Completer, Recorded
from skiplock._runtime.maintenance import Maintenance
from skiplock._runtime.queue_settings import QueueSettings
from skiplock._runtime.recycling import Recycling
from skiplock._runtime.slots import Slots
from skiplock._runtime.worker_state import WorkerState
from skiplock.errors import SkiplockError

log = logging.getLogger("skiplock.worker")

EMPTY_CLAIM_COOLDOWN = 0.005  # seconds; caps claims per idle worker at ~200/s under a NOTIFY flood
IDLE_MARK_RETRY = 0.25  # seconds; how soon to try again to mark the worker idle after a failure
REQUEUED = ("retry", "snooze")  # outcomes that can make their job claimable again at once


class IdleMark(Protocol):
    """Where the worker says whether it waits for news (the listener)."""

    idle_failed: bool

    def want_idle(self, idle: bool) -> None: ...


class ClaimLoop:
    def __init__(
        self,
        state: WorkerState,
        slots: Slots,
        completer: Completer,
        capacity: Capacity,
        cursor: ClaimCursor,
        settings: QueueSettings,
        recycling: Recycling,
        maintenance: Maintenance,
        *,
        burst: bool,
        poll_interval: float,
    ) -> None:
        self.state = state
        self.slots = slots
        self.completer = completer
        self.capacity = capacity
        self.cursor = cursor
        self.settings = settings
        self.recycling = recycling
        self.maintenance = maintenance
        self.burst = burst
        self.poll_interval = poll_interval
        self.wake: asyncio.Event = asyncio.Event()
        self.drained: bool = False  # the last claim found less than it asked for
        self.announced: int = 0  # counts announcements of new work (see new_work)
        self.refill_below: int = 1  # set by each claim round from the capacity
        # Why the last claim failed (None: it did not): a burst that ends on a failed claim did
        # not run what was due, and ``skiplock worker --burst`` exits 1.
        self.claim_error: str | None = None
        self.idle_mark: IdleMark | None = None  # set when the worker LISTENs

    def nudge(self) -> None:
        self.wake.set()

    def new_work(self) -> None:
        """Jobs may have become claimable (a NOTIFY, a promotion, a resumed queue)."""
        self.drained = False
        self.announced += 1
        self.nudge()

    def work_behind_cursor(self) -> None:
        """Jobs may have become claimable with keys older than the claim cursor's (promoted,
        reclaimed, or in a resumed queue): a claim reads every queue from the start again."""
        self.cursor.rescan()
        self.new_work()

    def want(self) -> int:
        """How many jobs to claim now."""
        want = self.slots.room(self.completer.pending)
        if self.recycling.enabled:  # no more than its share (--max-jobs), none once it is due
            left = self.recycling.claimable()
            if left is not None:
                return min(want, left)
        return want

    def capacity_freed(self) -> None:
        """A job finished or its outcome was written: start what is reserved, claim if due."""
        if self.state.stopping:
            return
        self.slots.start_waiting()
        self.claim_if_due()

    def claim_if_due(self) -> None:
        """Wake the claim loop when the slots and reserved jobs ran low (not after a claim that
        came up short: then only announced work or the poll sends it back to the queues)."""
        reserved = self.state.reserved
        claimed = len(self.state.busy) + len(reserved)
        if not self.drained and (not reserved or claimed < self.refill_below):
            self.nudge()
        elif self.burst:
            self.nudge()  # the burst may be over

    def recorded(self, batch: list[Recorded]) -> None:
        """Outcomes were written (or found lost), counted and reported: refill the slots."""
        self.capacity.throughput.add(len(batch))
        if any(r.job.entity_key is not None or r.outcome.kind in REQUEUED for r in batch):
            # The next job with that key, skipped by the last claim, or a job put back to run
            # again, may be claimable now, behind the claim cursor.
            self.drained = False
            self.cursor.rescan()
        if self.capacity.max_in_flight is not None and not self.drained:
            self.nudge()  # only written outcomes make room under the bound
        if self.recycling.reason is not None:
            self.nudge()  # it may be the last job this recycled worker waited for
        self.capacity_freed()

    async def run(self, queues: list[str]) -> None:
        """Claim until the worker stops (or a burst or a recycled worker is done)."""
        settings = self.settings
        idle_rounds = 0
        empty_claims = 0  # claims in a row that found nothing
        woken_by_news = False  # the wait below ended with an announcement of new work
        while not self.state.stopping:
            if not woken_by_news:
                await asyncio.sleep(0)  # let jobs that are about to finish free their slots first
            woken_by_news = False
            # Cleared every round: a wake-up that came while nothing could be claimed (all slots
            # busy, queues paused) must not make the wait below return at once, forever.
            self.wake.clear()
            want = self.want()
            self.refill_below = self.capacity.refill_below()
            active = [q for q in queues if q not in settings.paused]
            claimed = 0
            if want > 0 and active and not self.drained:
                announced = self.announced
                sent = time.monotonic()
                try:
                    claimed = await self.slots.claim(active, want)
                    self.claim_error = None
                    self.capacity.claim_took(time.monotonic() - sent, claimed)
                except (psycopg.Error, SkiplockError) as exc:
                    self.claim_error = str(exc).strip().splitlines()[0] or type(exc).__name__
                    again = "" if self.burst else ", retrying after the poll interval"
                    log.warning("claim failed%s: %s", again, exc)
                except (
                    Exception
                ) as exc:  # a bug, not a bad row (see claimed_rows): the worker lives
                    self.claim_error = f"{type(exc).__name__}: {exc}"
                    log.exception("claim failed unexpectedly")
                # Until new work is announced (or the poll interval passes), a slot that frees
                # does not send the worker back to an empty queue.  Not after an announcement
                # that came during the claim (its snapshot may have missed that job), nor when a
                # limit, not an empty queue, may have made the claim come up short: a queue's
                # limit, or any key's (the claim of limited keys takes no more than the slots
                # can start; docs/design.md, "Limits per key").
                limited = settings.keys_limited or any(q in settings.limits for q in active)
                self.drained = claimed < want and announced == self.announced and not limited
                if self.idle_mark is not None:
                    # Short: the queues are empty (or a limit held the claim back: a slot that
                    # frees may be news too), producers must say when that changes.  Full: this
                    # worker comes back for more by itself, no notification needed.
                    self.idle_mark.want_idle(claimed < want)
                empty_claims = 0 if claimed else empty_claims + 1
            if claimed:
                idle_rounds = 0
                # A piece (docs/design.md, "Claims in pieces"): send the next one at once if
                # there is room for it, not after the slots' next turns.
                piece = self.capacity.piece()
                woken_by_news = piece is not None and want >= piece
                continue
            in_flight = self.state.busy or self.state.reserved or self.completer.pending
            if self.recycling.reason is not None and not in_flight:
                return  # recycled: every job it claimed has run and been recorded
            if self.burst and not in_flight:
                # Nothing claimable, nothing running: run maintenance once more, then finish.
                idle_rounds += 1
                if idle_rounds > 1:
                    return
                await self.maintenance.run_once(force=True)
                self.drained = False  # it may have promoted or enqueued jobs: look once more,
                self.cursor.restart()  # from the start of every queue
                continue
            # Claims keep coming back empty: let wake-ups that arrive in the next moment collapse
            # into one, so a flood of NOTIFYs (anyone may send them) cannot drive claims.  The
            # first empty claim after work waits for nothing, so a new job starts at once.
            if empty_claims > 1:
                await asyncio.sleep(EMPTY_CLAIM_COOLDOWN)
            # Jittered, so that workers started together do not poll in step.  asyncio.timeout,
            # not wait_for: a wake-up resumes this loop directly, not through a task of its own.
            announced = self.announced
            wait = self.poll_interval * random.uniform(0.8, 1.2)
            if self.idle_mark is not None and self.idle_mark.idle_failed:
                wait = min(wait, IDLE_MARK_RETRY)  # producers may not notify this worker
            try:
                async with asyncio.timeout(wait):
                    await self.wake.wait()
            except TimeoutError:
                self.drained = False  # the poll: look again whatever was (not) announced
            # Told of new work (a NOTIFY), claim at once: a job is waiting, and this is its
            # latency.  The yield above only gathers slots that free together.
            woken_by_news = self.announced != announced
