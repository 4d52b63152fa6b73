"""When a worker process makes way for a fresh one: after ``max_jobs`` jobs, or once its memory
passes ``max_memory`` bytes (``skiplock worker --max-jobs / --max-memory``).

Tasks that leak (a cache that only grows, a library holding on to buffers) make a long-lived
worker grow until the host kills it.  A recycled worker stops claiming, runs the jobs it has
already claimed, and exits; under ``skiplock worker`` its supervisor starts a fresh process in
its place at once.  Nothing is given back or cut short, so a recycle costs no attempt and no
job runs twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import sys
from collections.abc import Callable

log = logging.getLogger("skiplock.worker")

# The exit status of a worker process that recycled itself (EX_TEMPFAIL): its supervisor
# replaces it at once, without the back-off of a process that died.
RECYCLED_EXIT = 75

MEMORY_CHECK_INTERVAL = 1.0  # seconds


def resident_bytes() -> int:
    """This process's resident memory now (Linux); elsewhere its peak, which only grows."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


class Recycling:
    """Decides when a worker has done its share; the worker asks, and stops claiming then."""

    def __init__(
        self,
        *,
        max_jobs: int | None = None,
        max_memory: int | None = None,
        memory: Callable[[], int] = resident_bytes,
    ) -> None:
        if max_jobs is not None and max_jobs < 1:
            raise ValueError(f"max_jobs must be >= 1, got {max_jobs}")
        if max_memory is not None and max_memory < 1:
            raise ValueError(f"max_memory must be >= 1 byte, got {max_memory}")
        self.max_jobs = max_jobs
        self.max_memory = max_memory
        self.memory = memory
        self.claimed: int = 0
        self.reason: str | None = None  # set once: why this worker stops claiming

    @property
    def enabled(self) -> bool:
        return self.max_jobs is not None or self.max_memory is not None

    def count_claimed(self, jobs: int) -> None:
        """The worker claimed ``jobs`` more (counted when the claim returns them, before they
        are started: a held-lock slot starts its job a few round trips later)."""
        self.claimed += jobs

    def claimable(self) -> int | None:
        """How many more jobs this worker may claim (None: no cap)."""
        if self.reason is not None:
            return 0
        if self.max_jobs is None:
            return None
        left = self.max_jobs - self.claimed
        if left <= 0:
            self._due(f"claimed its {self.max_jobs} jobs (--max-jobs)")
            return 0
        return left

    def check_memory(self) -> bool:
        """Whether memory is over the limit (then the worker is due)."""
        if self.max_memory is None or self.reason is not None:
            return self.reason is not None
        used = self.memory()
        if used > self.max_memory:
            self._due(
                f"uses {used / 2**20:.0f} MiB, over its {self.max_memory / 2**20:.0f} MiB "
                "(--max-memory)"
            )
            return True
        return False

    async def watch_memory(self, on_due: Callable[[], None]) -> None:
        """Check memory every MEMORY_CHECK_INTERVAL seconds until it is over the limit."""
        while not self.check_memory():
            await asyncio.sleep(MEMORY_CHECK_INTERVAL)
        on_due()

    def _due(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            log.info("recycling: this worker %s; it runs what it claimed, then exits", reason)
