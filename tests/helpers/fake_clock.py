"""A clock for tests of pure logic that reads the time through an injected callable."""

from __future__ import annotations


class FakeClock:
    """Stands still until a test moves ``now`` forward."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
