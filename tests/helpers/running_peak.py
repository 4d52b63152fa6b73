"""How many task runs overlap: a gauge for tests of concurrency limits."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class RunningPeak:
    """Counts the runs inside :meth:`running` now and the most that ever were at once; for
    async tasks and sync ones in threads alike."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self._lock = threading.Lock()

    @contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            yield
        finally:
            with self._lock:
                self.now -= 1
