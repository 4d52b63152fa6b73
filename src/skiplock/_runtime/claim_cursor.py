"""Where a leasing worker's next claim starts reading each queue's claim index.

A claimed job's entry stays in the claim index until vacuum removes it, and vacuum may not
while any snapshot could still see the job pending: a long transaction (a report, a stuck
session, a backup) keeps every entry claimed since it began.  A claim that reads a queue from
its best key walks all of them before it reaches a pending job, a cost that grows with the
queue's rate and the transaction's age (docs/design.md, "Claim cursor: where a claim starts
reading", has the figures).

So each claim starts after the last job this worker claimed from the queue (and still looks
at every better priority; see ``job_claim`` in jobs.sql).  What that skips is the same
priority's entries before the key: jobs already claimed, and the few that became due since
with an older run_at (a promoted retry, a released job, the next job of an entity key whose
running job finished, a job enqueued in a transaction that began before the last claimed job
was enqueued).  For those, the worker reads every queue from its lowest key again when a claim
comes up short (nothing more after the keys) or it learns of such work (:meth:`rescan`), and at
least every ``rescan_interval`` seconds.

Reads from the start are rationed by what they cost: after one that took ``t`` seconds (the
least of the last three: one slow claim, a fresh connection's first or one that waited for the
CPU, is no sign of a long transaction), the next waits until ``t`` / RESCAN_SHARE has passed
(the interval waits too), so they take at most about that share of the time.  With vacuum
keeping up, a read from the start costs what any claim does and the next may come
milliseconds later.  Under a long transaction it walks every entry claimed since the
transaction began, and a worker keeping up with its producers (so coming up short at most
claims) would read from the start at almost every claim (what that cost: the same section of
docs/design.md).  Then a job behind the keys waits up to ten times the cost of such a read, or
``rescan_interval``, or the poll interval when the worker is idle.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from skiplock.job import ClaimKey, Job, UnrunnableJob

RESCAN_INTERVAL = 1.0  # seconds between claims that read every queue from its lowest key
RESCAN_SHARE = 0.1  # the share of the time, at most, that claims reading from the start may take


class ClaimCursor:
    def __init__(
        self,
        rescan_interval: float = RESCAN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rescan_interval = rescan_interval
        self._clock = clock
        self._after: dict[str, ClaimKey] = {}
        now = clock()
        self._rescan_at = now + rescan_interval  # the next read from the start, at the latest
        self._wanted = False  # a read from the start was asked for ...
        self._asked = 0  # times rescan() was called (one during a claim outlives that claim)
        self._asked_at_start = 0
        self._allowed_at = 0.0  # ... and may come from then on
        self._costs: deque[float] = deque([0.0, 0.0], maxlen=3)  # of the last reads from the start
        self._began = now  # when the claim being made called start() ...
        self._from_start = True  # ... and whether it reads from the start

    def start(self) -> Mapping[str, ClaimKey]:
        """The key each queue's next claim starts after (a queue not listed: its lowest key);
        the claim is timed from here to :meth:`advance`."""
        now = self._clock()
        if now >= self._allowed_at and (self._wanted or now >= self._rescan_at):
            self._after.clear()
        self._began, self._from_start = now, not self._after
        self._asked_at_start = self._asked
        return dict(self._after)

    def advance(self, claimed: Sequence[Job], asked: int) -> None:
        """Record the claim that followed :meth:`start`: its jobs in claim order and how many it
        asked for."""
        now = self._clock()
        if self._from_start:  # what it cost decides when the next read from the start may come
            # Served, unless asked for again while it ran: its snapshot may predate that work.
            self._wanted = self._asked != self._asked_at_start
            self._rescan_at = now + self.rescan_interval
            self._costs.append(now - self._began)
            self._allowed_at = now + min(self._costs) * (1 / RESCAN_SHARE - 1)
        for job in claimed:
            if not isinstance(job, UnrunnableJob):  # whose run_at may stand for another
                self._after[job.queue] = job.claim_key
        if len(claimed) < asked:
            self._wanted = True  # nothing more after the keys: look from the start

    def rescan(self) -> None:
        """Jobs may have become claimable behind the keys: read from the start when allowed."""
        self._wanted = True
        self._asked += 1

    def restart(self) -> None:
        """Read every queue from its lowest key at the next claim, whatever the rationing: the
        last look of a burst worker before it exits must not miss a job behind the keys."""
        self._after.clear()
