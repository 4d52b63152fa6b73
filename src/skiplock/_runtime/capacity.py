"""How many jobs a leasing worker claims and starts.  Pure arithmetic, no I/O.

A worker has ``concurrency`` slots.  Besides the jobs in its slots it may hold claimed jobs that
wait for a slot (*reserved*): one claim statement then serves many jobs, which is what makes
short jobs fast.  It reserves only what it would start within ``horizon`` seconds at the rate it
has been finishing jobs (at most ``prefetch``), so a worker busy with long jobs reserves nothing
and never sits on work another worker could start now.  When its claims take longer than that
(a server some milliseconds away), it reserves what it starts within a few claims' time instead:
what is left when the next claim is sent must last until that claim's jobs arrive
(docs/design.md, "The reserve covers the claim's round trip").  Reserved jobs have not run: a crash
leaves them to be reclaimed when their leases expire, it does not run them twice.  While its
slots have work it claims in pieces of about ``PIECE`` jobs, as soon as there is room for one,
so that a job enqueued meanwhile is claimed within a small claim's time (docs/design.md,
"Claims in pieces").

Finished jobs whose outcomes are not written yet (*unwritten*) may number up to
``max(concurrency, 600)`` before the worker stops starting and claiming: short jobs share one
write per batch, and the next claim overlaps the last write, yet a worker that outruns its writes
cannot pile up running rows.  Jobs a ``kill -9`` can make run twice (started or finished, not
yet written): at most ``concurrency + max(concurrency, 600)`` per worker.

``max_in_flight`` bounds that exposure harder: the worker claims nothing while that many of its
claimed jobs (reserved, running, or finished and unwritten) are not yet recorded, so neither the
jobs a crash re-runs nor the rows it leaves ``running`` can exceed it.  Short jobs then wait for
writes more often: fewer jobs per second for a smaller worst case.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable

# Finished jobs that may wait for their write, whatever the concurrency: a write costs a few
# milliseconds however small it is, so this caps a worker of short jobs at about this many jobs
# per write's time (why 600: docs/design.md, "Unwritten outcomes: a floor of 600").
UNWRITTEN_FLOOR = 600

# The reserve holds at least this many claims' time of work.  A claim is sent once half of it is
# missing, so the half left lasts two claims; and a worker still finding its rate (the reserve
# follows the rate, the rate follows the reserve) grows it twofold per claim instead of by a
# few jobs (docs/design.md, "The reserve covers the claim's round trip").
CLAIMS_AHEAD = 4
CLAIM_TIMES_KEPT = 5  # recent claims whose middle time sets the reach
# While its slots have work a worker claims in pieces of PIECE jobs, or, when its server is far
# away, as many as make the round trip a third of a claim's time.  A job enqueued during a
# backlog waits for the next claim to be sent and then for that claim: a piece's time each,
# not half the target's (docs/design.md, "Claims in pieces").
PIECE = 200
PIECE_ROUND_TRIP_SHARE = 1 / 3


class Throughput:
    """Jobs finished per second over the last ``window`` seconds."""

    def __init__(self, window: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.clock = clock
        self._marks: deque[tuple[float, int]] = deque()
        self._total = 0

    def add(self, n: int = 1) -> None:
        now = self.clock()
        if self._marks and now - self._marks[-1][0] < 0.001:  # one mark per millisecond
            at, count = self._marks.pop()
            self._marks.append((at, count + n))
        else:
            self._marks.append((now, n))
        self._total += n

    def per_second(self) -> float:
        now = self.clock()
        while self._marks and now - self._marks[0][0] > self.window:
            self._total -= self._marks.popleft()[1]
        if not self._marks:
            return 0.0
        # Over the time the marks span, but never less than 10 ms: a first handful of jobs
        # finished in one instant is not a rate of millions per second.
        return self._total / max(now - self._marks[0][0], 0.01)


class Capacity:
    def __init__(
        self,
        concurrency: int,
        prefetch: int,
        *,
        max_in_flight: int | None = None,
        horizon: float = 0.1,
        throughput: Throughput | None = None,
    ) -> None:
        if concurrency < 1 or prefetch < 0 or horizon < 0:
            raise ValueError("concurrency must be >= 1, prefetch and horizon >= 0")
        if max_in_flight is not None and max_in_flight < concurrency:
            raise ValueError(
                f"max_in_flight ({max_in_flight}) must be at least concurrency ({concurrency}):"
                " every slot holds a claimed job"
            )
        self.concurrency = concurrency
        self.max_in_flight = max_in_flight
        self.prefetch = prefetch
        self.horizon = horizon
        self.unwritten_max: int = max(concurrency, UNWRITTEN_FLOOR)
        self.throughput: Throughput = throughput or Throughput()
        self._claim_times: deque[float] = deque(maxlen=CLAIM_TIMES_KEPT)
        self._claim_sizes: deque[int] = deque(maxlen=CLAIM_TIMES_KEPT)
        self._round_trips: deque[float] = deque(maxlen=CLAIM_TIMES_KEPT)
        self._piece: int | None = None

    def claim_took(self, seconds: float, jobs: int | None = None) -> None:
        """A claim (of ``jobs``, when known) took this long, from its send to its jobs in the
        worker."""
        self._claim_times.append(seconds)
        if jobs:
            self._claim_sizes.append(jobs)
            self._piece = None

    def round_trip_took(self, seconds: float) -> None:
        """A statement that does nothing took this long on a connection of the worker's."""
        self._round_trips.append(seconds)
        self._piece = None

    def round_trips_known(self) -> bool:
        """Whether as many round trips are timed as the piece looks back on."""
        return len(self._round_trips) == CLAIM_TIMES_KEPT

    def piece(self) -> int | None:
        """The most one claim asks for while the slots have work; None before a round trip
        and a few claims of jobs are timed."""
        if self._piece is None and self._round_trips and len(self._claim_sizes) == CLAIM_TIMES_KEPT:
            trip = min(self._round_trips)  # a round trip is only ever slowed, never sped up
            took = statistics.median(self._claim_times)
            per_job = max(took - trip, 1e-6) / statistics.median(self._claim_sizes)
            share = PIECE_ROUND_TRIP_SHARE
            self._piece = max(PIECE, int(trip * (1 - share) / share / per_job))
        return self._piece

    def claim_time(self) -> float | None:
        """What a claim takes lately (the middle of the recent ones: one slow claim among them
        does not count); None before the first."""
        return statistics.median(self._claim_times) if self._claim_times else None

    def reach(self) -> float:
        """Seconds of work to hold beyond the slots: the horizon, or a few recent claims' time
        when that is longer."""
        took = self.claim_time()
        return self.horizon if took is None else max(self.horizon, CLAIMS_AHEAD * took)

    def ahead(self) -> int:
        """Jobs to hold beyond the slots: what this worker starts within :meth:`reach`."""
        return min(self.prefetch, int(self.throughput.per_second() * self.reach()))

    def startable(self, active: int, unwritten: int) -> int:
        """Reserved jobs that may start now."""
        if unwritten > self.unwritten_max:
            return 0  # let the writes catch up first
        return max(0, self.concurrency - active)

    def refill_below(self) -> int:
        """Claim again once active + reserved jobs drop below this (see :meth:`to_claim`)."""
        target = self.concurrency + self.ahead()
        half, piece = self._refill_below(target), self.piece()
        return half if piece is None else max(half, target - piece + 1)

    @staticmethod
    def _refill_below(target: int) -> int:
        # Below this, at least half of the target (and at least one job) is missing.
        return target - max(1, target // 2) + 1

    def to_claim(self, active: int, reserved: int, unwritten: int) -> int:
        """How many jobs the next claim should ask for; 0 means do not claim now.

        A slot that is free with nothing reserved is filled at once, even by a claim of one;
        otherwise the worker waits until half of its target is missing, so that claims stay
        large while it keeps its slots busy from what it reserved.
        """
        target = self.concurrency + self.ahead()
        over = max(0, unwritten - self.unwritten_max)
        room, taken = target - active - reserved - over, active + reserved + over
        if self.max_in_flight is not None:
            # Never more claimed-and-unrecorded jobs than the bound (a busy slot between two
            # jobs counts as one more: the bound is only ever overestimated).
            in_flight = active + reserved + unwritten
            if self.max_in_flight - in_flight < room:
                target, room, taken = self.max_in_flight, self.max_in_flight - in_flight, in_flight
        if room <= 0:
            return 0
        piece = self.piece()
        if piece is not None and room >= piece:
            return piece  # room for a piece: claim it now, not once half the target is gone
        if reserved == 0 and active < self.concurrency and unwritten <= self.unwritten_max:
            return room
        return room if taken < self._refill_below(target) else 0
