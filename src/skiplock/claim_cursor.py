"""Where a leasing worker's next claim starts reading each queue's claim index.

A claimed job's entry stays in the claim index until vacuum removes it, and vacuum may not
while any snapshot could still see the job pending: a long transaction (a report, a stuck
session, a backup) keeps every entry claimed since it began.  A claim that reads a queue from
its best key walks all of them before it reaches a pending job: 0.1 ms per thousand, so a
queue running 5,000 jobs/s under a one-minute transaction ends up spending tens of
milliseconds on each claim.

So each claim starts after the last job this worker claimed from the queue (and still looks
at every better priority; see ``job_claim`` in jobs.sql).  What that skips is the same
priority's entries before the key: jobs already claimed, and the few that became due since
with an older run_at (a promoted retry, a released job).  For those, the cursor starts from
the lowest key again whenever a claim comes up short and at least every ``rescan_interval``
seconds; such a job waits at most that long for its turn behind newer ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from .job import ClaimKey, Job

RESCAN_INTERVAL = 1.0  # seconds between claims that read every queue from its lowest key


class ClaimCursor:
    def __init__(
        self,
        rescan_interval: float = RESCAN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rescan_interval = rescan_interval
        self._clock = clock
        self._after: dict[str, ClaimKey] = {}
        self._rescan_at = clock() + rescan_interval

    def start(self) -> Mapping[str, ClaimKey]:
        """The key each queue's next claim starts after (a queue not listed: its lowest key)."""
        now = self._clock()
        if now >= self._rescan_at:
            self._after.clear()
            self._rescan_at = now + self.rescan_interval
        return dict(self._after)

    def advance(self, claimed: Sequence[Job], asked: int) -> None:
        """Record a claim's jobs (in claim order); ``asked`` is how many it asked for."""
        if len(claimed) < asked:
            # Nothing more after the keys: look again from the start, which also catches jobs
            # that became due with an older key.
            self._after.clear()
            return
        for job in claimed:
            self._after[job.queue] = job.claim_key
