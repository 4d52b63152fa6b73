"""ClaimCursor: where a worker's next claim starts reading each queue (pure logic, fake clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from helpers.fake_clock import FakeClock
from skiplock._runtime.claim_cursor import ClaimCursor
from skiplock.job import ClaimKey, Job, JobStatus

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
        locked_at=T0,
        entity_key=None,
        idempotency_key=None,
        created_at=T0,
    )


def claim(
    cursor: ClaimCursor,
    clock: FakeClock,
    jobs: list[Job],
    asked: int | None = None,
    seconds: float = 0.001,
) -> dict[str, ClaimKey]:
    """One claim as the worker makes it, taking ``seconds``: start(), the statement, advance()."""
    after = cursor.start()
    clock.now += seconds
    cursor.advance(jobs, len(jobs) if asked is None else asked)
    return dict(after)


def test_first_claim_reads_every_queue_from_its_start() -> None:
    assert ClaimCursor(clock=FakeClock()).start() == {}


def test_a_full_claim_moves_each_queue_to_its_last_claimed_key() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock=clock)
    claim(cursor, clock, [job(1, "a", seconds=1), job(7, "b", seconds=2), job(3, "a", seconds=5)])
    assert cursor.start() == {
        "a": (0, T0 + timedelta(seconds=5), 3),
        "b": (0, T0 + timedelta(seconds=2), 7),
    }


def test_after_a_short_claim_the_next_reads_from_the_start_when_that_is_cheap() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock=clock)
    claim(cursor, clock, [job(1), job(2)])  # from the start, 1 ms: the next may come 9 ms later
    clock.now += 0.01
    assert claim(cursor, clock, [job(3)], asked=2) == {"q": job(2).claim_key}  # came up short
    assert cursor.start() == {}


def test_reads_from_the_start_take_at_most_a_tenth_of_the_time() -> None:
    # Under a long transaction a read from the start walks every entry claimed since it began.
    clock = FakeClock()
    cursor = ClaimCursor(rescan_interval=1.0, clock=clock)
    for n in range(3):  # short claims from the start, 50 ms each: the third sets the pace
        assert claim(cursor, clock, [job(n)], asked=5, seconds=0.05) == {}
    for n in range(3, 11):  # short claims from the key while the next read waits its turn
        clock.now += 0.05
        assert claim(cursor, clock, [job(n)], asked=5) == {"q": job(n - 1).claim_key}
    clock.now += 0.06  # 0.46 s after the third 50 ms read ended: 9 x its cost
    assert cursor.start() == {}


def test_one_slow_read_from_the_start_does_not_hold_the_next_back() -> None:
    # A fresh connection's first claim, or one that waited for the CPU, is no long transaction.
    clock = FakeClock()
    cursor = ClaimCursor(rescan_interval=1.0, clock=clock)
    claim(cursor, clock, [job(1)], asked=5, seconds=0.2)
    assert claim(cursor, clock, [job(2)], asked=5) == {}
    clock.now += 0.01
    claim(cursor, clock, [job(3)], asked=5, seconds=0.2)  # and one more, later
    clock.now += 0.01
    assert cursor.start() == {}


def test_the_rescan_interval_waits_for_the_budget_too() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(rescan_interval=1.0, clock=clock)
    for n in range(3):  # full claims from the start, each at its interval, 200 ms each
        clock.now += 1.8
        assert claim(cursor, clock, [job(n)], seconds=0.2) == {}
    clock.now += 1.0  # the interval passed, the budget (9 x 200 ms) not
    assert claim(cursor, clock, [job(3)]) == {"q": job(2).claim_key}
    clock.now += 0.8
    assert cursor.start() == {}


def test_rescan_asks_for_a_read_from_the_start() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock=clock)
    claim(cursor, clock, [job(1), job(2, "other")])
    clock.now += 0.01
    assert cursor.start() != {}  # full claims: no reason to go back
    cursor.rescan()
    assert cursor.start() == {}


def test_a_rescan_asked_for_while_a_read_from_the_start_runs_is_not_lost() -> None:
    # A retry written while that claim ran: the claim's snapshot may predate it.
    clock = FakeClock()
    cursor = ClaimCursor(clock=clock)
    claim(cursor, clock, [job(1)])
    cursor.rescan()
    assert cursor.start() == {}  # the read from the start ...
    cursor.rescan()  # ... asked for again while it runs
    clock.now += 0.001
    cursor.advance([job(2)], 1)  # a full claim
    clock.now += 0.01  # past the rationing
    assert cursor.start() == {}  # read from the start once more
    clock.now += 0.001
    cursor.advance([job(3)], 1)
    clock.now += 0.01
    assert cursor.start() == {"q": job(3).claim_key}  # and that one served it


def test_restart_reads_from_the_start_at_once_whatever_the_rationing() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock=clock)
    for n in range(3):  # short reads from the start, 50 ms each: the next is rationed 0.45 s
        assert claim(cursor, clock, [job(n)], asked=5, seconds=0.05) == {}
    assert claim(cursor, clock, [job(3)], asked=5) == {"q": job(2).claim_key}
    cursor.restart()
    assert cursor.start() == {}


def test_every_queue_is_read_from_its_start_again_after_the_rescan_interval() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(rescan_interval=1.0, clock=clock)
    claim(cursor, clock, [job(1)])
    clock.now += 0.9
    assert claim(cursor, clock, [job(2)]) == {"q": job(1).claim_key}  # full claims from the key
    clock.now += 0.2  # 1.1 s after the last read from the start
    assert claim(cursor, clock, [job(3)]) == {}
    clock.now += 0.5
    assert cursor.start() == {"q": job(3).claim_key}  # the next is a full interval later


def test_start_returns_a_copy() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock=clock)
    claim(cursor, clock, [job(1)])
    keys = cursor.start()
    claim(cursor, clock, [job(2)])
    assert keys == {"q": job(1).claim_key}
