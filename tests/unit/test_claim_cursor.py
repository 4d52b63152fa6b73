"""ClaimCursor: where a worker's next claim starts reading each queue (pure logic, fake clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fake_clock import FakeClock
from skiplock.claim_cursor import ClaimCursor
from skiplock.job import Job, JobStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(job_id: int, queue: str = "q", priority: int = 0, seconds: int = 0) -> Job:
    return Job(
        id=job_id,
        queue=queue,
        task="t",
        payload={},
        status=JobStatus.RUNNING,
        priority=priority,
        run_at=T0 + timedelta(seconds=seconds),
        attempts=1,
        max_attempts=5,
        locked_by="w",
        locked_until=None,
        entity_key=None,
        idempotency_key=None,
        created_at=T0,
    )


def test_first_claim_reads_every_queue_from_its_start() -> None:
    assert ClaimCursor(clock=FakeClock()).start() == {}


def test_a_full_claim_moves_each_queue_to_its_last_claimed_key() -> None:
    cursor = ClaimCursor(clock=FakeClock())
    claimed = [job(1, "a", seconds=1), job(7, "b", seconds=2), job(3, "a", seconds=5)]
    cursor.advance(claimed, asked=3)
    assert cursor.start() == {
        "a": (0, T0 + timedelta(seconds=5), 3),
        "b": (0, T0 + timedelta(seconds=2), 7),
    }


def test_a_short_claim_sends_every_queue_back_to_its_start() -> None:
    cursor = ClaimCursor(clock=FakeClock())
    cursor.advance([job(1), job(2)], asked=2)
    assert cursor.start() != {}
    cursor.advance([job(3)], asked=2)  # came up short: nothing more after the key
    assert cursor.start() == {}


def test_every_queue_is_read_from_its_start_again_after_the_rescan_interval() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(rescan_interval=1.0, clock=clock)
    cursor.advance([job(1)], asked=1)
    clock.now += 0.9
    assert cursor.start() == {"q": job(1).claim_key}
    clock.now += 0.2  # 1.1 s after the cursor was made
    assert cursor.start() == {}
    cursor.advance([job(2)], asked=1)
    clock.now += 0.5
    assert cursor.start() == {"q": job(2).claim_key}  # the next rescan is a full interval later


def test_start_returns_a_copy() -> None:
    cursor = ClaimCursor(clock=FakeClock())
    cursor.advance([job(1)], asked=1)
    keys = cursor.start()
    cursor.advance([job(2)], asked=1)
    assert keys == {"q": job(1).claim_key}
