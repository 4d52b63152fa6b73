"""How many jobs a worker claims ahead and starts: the arithmetic of skiplock._runtime.capacity."""

from __future__ import annotations

import pytest

from helpers.claim_drain import drain
from helpers.fake_clock import FakeClock
from skiplock._runtime.capacity import CLAIMS_AHEAD, UNWRITTEN_FLOOR, Capacity, Throughput


def test_throughput_counts_the_last_window_only() -> None:
    clock = FakeClock()
    meter = Throughput(window=1.0, clock=clock)
    assert meter.per_second() == 0.0
    for _ in range(10):
        meter.add(50)
        clock.now += 0.1
    assert meter.per_second() == pytest.approx(500 / 1.0, rel=0.15)
    clock.now += 5.0  # nothing finished for a while
    assert meter.per_second() == 0.0


def test_a_first_burst_is_not_an_infinite_rate() -> None:
    clock = FakeClock()
    meter = Throughput(clock=clock)
    meter.add(10)
    assert meter.per_second() == pytest.approx(10 / 0.01)


def _capacity(concurrency: int, prefetch: int, rate: float) -> Capacity:
    clock = FakeClock()
    meter = Throughput(window=1.0, clock=clock)
    if rate:
        for _ in range(10):
            meter.add(int(rate / 10))
            clock.now += 0.1
    return Capacity(concurrency, prefetch, horizon=0.1, throughput=meter)


def test_long_jobs_reserve_nothing() -> None:
    cap = _capacity(10, 500, rate=2.0)  # 2 jobs a second
    assert cap.ahead() == 0
    assert cap.to_claim(active=0, reserved=0, unwritten=0) == 10
    # one slot frees with nothing reserved: fill it at once, with a claim of one
    assert cap.to_claim(active=9, reserved=0, unwritten=0) == 1
    assert cap.to_claim(active=10, reserved=0, unwritten=0) == 0


def test_short_jobs_reserve_what_starts_within_the_horizon_capped_by_prefetch() -> None:
    cap = _capacity(10, 500, rate=3000.0)
    assert cap.ahead() == pytest.approx(300, abs=40)
    assert _capacity(10, 100, rate=3000.0).ahead() == 100
    assert _capacity(10, 0, rate=3000.0).ahead() == 0


def test_claims_stay_large_while_reserved_jobs_keep_the_slots_busy() -> None:
    cap = _capacity(10, 90, rate=100_000.0)  # ahead = 90, target = 100
    assert cap.to_claim(active=0, reserved=0, unwritten=0) == 100
    assert cap.to_claim(active=10, reserved=60, unwritten=0) == 0  # 30 missing: not yet
    assert cap.to_claim(active=10, reserved=40, unwritten=0) == 50  # half missing: claim
    assert cap.refill_below() == 51


def test_unwritten_outcomes_hold_back_starts_and_claims() -> None:
    cap = _capacity(10, 0, rate=0.0)
    limit = max(10, UNWRITTEN_FLOOR)
    assert cap.startable(active=3, unwritten=limit) == 7
    assert cap.startable(active=3, unwritten=limit + 1) == 0
    assert cap.to_claim(active=0, reserved=0, unwritten=limit + 5) == 5
    # whatever the rate, started + unwritten jobs stay within concurrency + the unwritten limit
    fast = _capacity(10, 500, rate=100_000.0)
    for unwritten in range(0, limit + 100, 7):
        for active in range(0, 11):
            room = fast.to_claim(active, 0, unwritten)
            assert active + room + unwritten <= 10 + fast.ahead() + limit


def test_the_unwritten_limit_is_the_documented_one() -> None:
    """README and docs/worker.md promise a crash exposure of at most N + max(N, 600) jobs per
    process: no more than max(N, 600) finished jobs wait for their write."""
    for concurrency, limit in ((10, 600), (600, 600), (1000, 1000)):
        cap = _capacity(concurrency, 0, rate=0.0)
        assert cap.startable(active=0, unwritten=limit) == concurrency
        assert cap.startable(active=0, unwritten=limit + 1) == 0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        Capacity(0, 10)
    with pytest.raises(ValueError):
        Capacity(1, -1)


def test_max_in_flight_bounds_claimed_and_unrecorded_jobs() -> None:
    cap = _capacity(10, 500, rate=100_000.0)  # unbounded, it would hold 10 + 500
    cap.max_in_flight = 40
    assert cap.to_claim(active=0, reserved=0, unwritten=0) == 40
    # running, reserved and unwritten jobs all count against the bound
    for active in range(0, 11):
        for reserved in range(0, 41, 5):
            for unwritten in range(0, 41, 3):
                room = cap.to_claim(active, reserved, unwritten)
                assert room >= 0
                if room:
                    assert active + reserved + unwritten + room <= 40


def test_a_bounded_worker_claims_again_once_half_the_bound_is_free() -> None:
    cap = _capacity(10, 500, rate=100_000.0)
    cap.max_in_flight = 40
    # slots busy, jobs reserved, 25 in flight: not yet (the claim would be small)
    assert cap.to_claim(active=10, reserved=5, unwritten=10) == 0
    # written outcomes freed more than half of the bound: claim the free part
    assert cap.to_claim(active=10, reserved=5, unwritten=0) == 25
    # a free slot with nothing reserved is filled at once, within the bound
    assert cap.to_claim(active=9, reserved=0, unwritten=30) == 1


def test_max_in_flight_below_concurrency_is_refused() -> None:
    with pytest.raises(ValueError, match="at least concurrency"):
        Capacity(10, 0, max_in_flight=9)
    assert Capacity(10, 0, max_in_flight=10).max_in_flight == 10


def _drain_rate(claim_seconds: float, prefetch: int, *, jobs: int = 20_000) -> float:
    """Jobs per second of a simulated drain: slots that could run ``jobs`` jobs at 20,000 a
    second, fed by claims that each take ``claim_seconds`` (one at a time, as the claim loop
    sends them), sized by the capacity's arithmetic, outcomes recorded as the jobs end."""
    clock = FakeClock()
    cap = Capacity(10, prefetch, horizon=0.1, throughput=Throughput(clock=clock))
    run = drain(cap, clock, lambda _: claim_seconds, jobs=jobs, service=20_000, step=0.001)
    return jobs / run.seconds


def test_a_slow_claim_does_not_hold_the_reserve_to_a_crawl() -> None:
    """The reserve follows the rate and the rate follows the reserve: with claims that take
    longer than half the horizon (a server 20 ms away), a reserve sized by the horizon alone
    grew by a few jobs a claim, and a drain of 20,000 jobs ended before it had grown
    (docs/design.md, "The reserve covers the claim's round trip")."""
    assert _drain_rate(0.001, 2000) > 0.9 * 20_000  # a nearby server: as before
    assert _drain_rate(0.05, 2000) > 0.5 * 20_000


def test_the_reach_is_the_horizon_or_a_few_recent_claims() -> None:
    cap = _capacity(10, 10_000, rate=3000.0)
    assert cap.reach() == 0.1  # no claim yet
    for _ in range(5):
        cap.claim_took(0.001)
    assert cap.reach() == 0.1  # claims far shorter than the horizon leave it as it was
    for seconds in (0.05, 0.05, 0.05, 0.05, 2.0):  # one slow claim among them does not count
        cap.claim_took(seconds)
    assert cap.reach() == pytest.approx(CLAIMS_AHEAD * 0.05)
    assert cap.ahead() == pytest.approx(3000 * CLAIMS_AHEAD * 0.05, rel=0.15)
    capped = _capacity(10, 100, rate=3000.0)
    capped.claim_took(0.05)
    assert capped.ahead() == 100  # prefetch still caps it
