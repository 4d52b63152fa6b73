"""EarlyCancels: cancel requests kept for a held-lock job claimed here and not started yet."""

from __future__ import annotations

from skiplock.early_cancels import KEPT_MAX, KEPT_SECONDS, EarlyCancels


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_request_that_came_after_the_claim_is_taken_once() -> None:
    clock = Clock()
    early = EarlyCancels(clock)
    claimed_at = clock.now
    clock.now += 0.4
    early.add(7)
    clock.now += 0.01
    assert early.take(7, claimed_at)
    assert not early.take(7, claimed_at)  # used up
    assert len(early) == 0


def test_a_request_older_than_the_claim_is_about_an_earlier_claim_and_is_dropped() -> None:
    clock = Clock()
    early = EarlyCancels(clock)
    early.add(7)
    clock.now += 5.0
    assert not early.take(7, claimed_at=clock.now)
    assert len(early) == 0


def test_a_request_for_another_job_is_kept() -> None:
    clock = Clock()
    early = EarlyCancels(clock)
    early.add(7)
    assert not early.take(8, claimed_at=clock.now - 1)
    assert len(early) == 1


def test_requests_expire_after_a_while() -> None:
    clock = Clock()
    early = EarlyCancels(clock)
    claimed_at = clock.now
    early.add(1)
    clock.now += KEPT_SECONDS + 0.1
    assert not early.take(1, claimed_at)  # too late to be about the claim's start gap
    early.add(2)
    clock.now += KEPT_SECONDS / 2
    early.add(3)  # each add drops the expired ones
    clock.now += KEPT_SECONDS / 2 + 0.1
    early.add(4)
    assert len(early) == 2  # 3 and 4; 2 expired
    assert early.take(3, claimed_at) and early.take(4, claimed_at)


def test_a_repeated_request_counts_from_its_last_arrival() -> None:
    clock = Clock()
    early = EarlyCancels(clock)
    early.add(1)
    clock.now += 1.0
    claimed_at = clock.now
    clock.now += 0.1
    early.add(1)
    assert len(early) == 1
    assert early.take(1, claimed_at)


def test_at_most_kept_max_requests_wait_the_oldest_go_first() -> None:
    clock = Clock()
    early = EarlyCancels(clock)
    claimed_at = clock.now
    for job_id in range(KEPT_MAX + 5):
        clock.now += 0.001
        early.add(job_id)
    assert len(early) == KEPT_MAX
    assert not early.take(4, claimed_at)
    assert early.take(5, claimed_at) and early.take(KEPT_MAX + 4, claimed_at)
