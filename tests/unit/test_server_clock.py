"""The server's clock as a worker carries it between readings (periodic ticks fall by it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from helpers.fake_clock import FakeClock
from skiplock._runtime.periodic import ServerClock


def test_a_reading_is_taken_halfway_and_carried_on_the_monotonic_clock() -> None:
    monotonic = FakeClock(100.0)
    clock = ServerClock(monotonic)
    assert clock.now() is None and clock.stale()
    server = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
    clock.record(server, sent=100.0, received=100.2)  # read at 100.1
    monotonic.now = 100.2
    assert clock.now() == server + timedelta(seconds=0.1)
    monotonic.now = 130.1
    assert clock.now() == server + timedelta(seconds=30)
    assert not clock.stale()
    monotonic.now = 100.2 + ServerClock.REFRESH
    assert clock.stale()
