"""Retry policies (skiplock.retry): property tests of the backoff; pure, no database."""

from __future__ import annotations

import math
import random
import statistics
import sys

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from skiplock import ExponentialBackoff, FixedDelay

REL = 1e-9  # float rounding slack for band checks

bases = st.just(0.0) | st.floats(min_value=1e-3, max_value=1e4)
factors = st.just(1.0) | st.floats(min_value=1.0, max_value=10.0)
caps = st.just(0.0) | st.floats(min_value=1e-3, max_value=1e7)
jitters = st.just(0.0) | st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
attempts_st = st.integers(min_value=1, max_value=10_000)


def reference_nominal(base: float, factor: float, cap: float, attempts: int) -> float:
    """min(cap, base * factor ** (attempts - 1)), computed in log space (never overflows)."""
    if base == 0 or cap == 0:
        return 0.0
    log_value = math.log(base) + (attempts - 1) * math.log(factor)
    return cap if log_value >= math.log(cap) else min(cap, math.exp(log_value))


def assert_in_band(policy: ExponentialBackoff, attempts: int, delay: float) -> None:
    nominal = policy.nominal(attempts)
    low = nominal * (1 - policy.jitter)
    high = min(policy.cap, nominal * (1 + policy.jitter))
    assert math.isfinite(delay)
    assert 0.0 <= delay <= policy.cap
    assert low * (1 - REL) - 1e-300 <= delay <= high * (1 + REL) + 1e-300, (
        f"delay {delay} outside [{low}, {high}] (nominal {nominal})"
    )


@given(base=bases, factor=factors, cap=caps, jitter=jitters, attempts=attempts_st)
def test_delay_stays_in_the_jitter_band_and_under_the_cap(
    base: float, factor: float, cap: float, jitter: float, attempts: int
) -> None:
    policy = ExponentialBackoff(base=base, factor=factor, cap=cap, jitter=jitter)
    for _ in range(5):
        assert_in_band(policy, attempts, policy.delay(attempts))


@given(base=bases, factor=factors, cap=caps, attempts=attempts_st)
def test_nominal_is_base_times_factor_power_capped(
    base: float, factor: float, cap: float, attempts: int
) -> None:
    policy = ExponentialBackoff(base=base, factor=factor, cap=cap)
    expected = reference_nominal(base, factor, cap, attempts)
    assert policy.nominal(attempts) == pytest.approx(expected, rel=1e-6, abs=1e-12)


@given(base=bases, factor=factors, cap=caps, attempts=st.integers(1, 10_000))
def test_nominal_is_non_decreasing_in_attempts(
    base: float, factor: float, cap: float, attempts: int
) -> None:
    policy = ExponentialBackoff(base=base, factor=factor, cap=cap)
    values = [policy.nominal(a) for a in (attempts, attempts + 1, attempts + 2, attempts * 7)]
    assert values == sorted(values)


@given(
    base=st.floats(min_value=1e-3, max_value=1e4),
    factor=st.floats(min_value=1.001, max_value=10.0),
    cap=st.floats(min_value=1e-3, max_value=1e7),
)
def test_nominal_reaches_the_cap_and_stays_there(base: float, factor: float, cap: float) -> None:
    policy = ExponentialBackoff(base=base, factor=factor, cap=cap)
    # log(1e7 / 1e-3) / log(1.001) is about 23,000 attempts: past that, always the cap.
    for attempts in (30_000, 10**6, 10**12, sys.maxsize, 10**40):
        assert policy.nominal(attempts) == cap
        assert_in_band(policy, attempts, policy.delay(attempts))


@given(attempts=st.integers(min_value=1, max_value=10**30))
def test_huge_attempt_counts_never_overflow(attempts: int) -> None:
    policy = ExponentialBackoff()
    delay = policy.delay(attempts)
    assert 0.0 <= delay <= 3600.0


finite = st.floats(min_value=0.0, allow_nan=False, allow_infinity=False)


@given(
    base=finite,
    factor=st.floats(min_value=1.0, allow_nan=False, allow_infinity=False),
    cap=finite,
    attempts=st.integers(min_value=1, max_value=10_000),
)
@example(base=1e-300, factor=2.0, cap=1e300, attempts=10_000)
@example(base=5e-324, factor=2.0, cap=1.0, attempts=2_000)
@example(base=1e-10, factor=2.0, cap=sys.float_info.max, attempts=10_000)
@example(base=2.0, factor=2.0, cap=5e-324, attempts=1)
def test_any_finite_valid_parameters_never_overflow(
    base: float, factor: float, cap: float, attempts: int
) -> None:
    # Valid per the constructor: base, cap >= 0 and factor >= 1.  A very small base with a
    # large cap makes cap / base overflow to inf (then OverflowError from factor ** exponent),
    # a tiny cap with a large base makes it underflow to 0 (then log(0): "math domain error").
    policy = ExponentialBackoff(base=base, factor=factor, cap=cap)
    assert_in_band(policy, attempts, policy.delay(attempts))


def test_default_waits_are_about_1_2_4_8_seconds_and_at_most_an_hour() -> None:
    policy = ExponentialBackoff()
    assert [policy.nominal(a) for a in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert policy.nominal(12) == 2048.0
    assert policy.nominal(13) == 3600.0  # 4096 capped
    assert policy.nominal(10_000) == 3600.0
    for attempts in (1, 5, 13, 100):
        assert_in_band(policy, attempts, policy.delay(attempts))


def test_zero_base_or_zero_cap_means_retry_at_once() -> None:
    assert ExponentialBackoff(base=0.0).delay(50) == 0.0
    assert ExponentialBackoff(cap=0.0).delay(50) == 0.0


def test_no_jitter_gives_the_nominal_delay_exactly() -> None:
    policy = ExponentialBackoff(base=2.0, factor=3.0, cap=100.0, jitter=0.0)
    assert [policy.delay(a) for a in range(1, 6)] == [2.0, 6.0, 18.0, 54.0, 100.0]


# -- invalid parameters ------------------------------------------------------------------


@given(value=st.floats(max_value=-1e-12, allow_infinity=False))
def test_negative_base_or_cap_is_rejected(value: float) -> None:
    with pytest.raises(ValueError, match="base and cap"):
        ExponentialBackoff(base=value)
    with pytest.raises(ValueError, match="base and cap"):
        ExponentialBackoff(cap=value)


@given(value=st.floats(max_value=1.0, exclude_max=True, allow_infinity=False))
def test_factor_below_one_is_rejected(value: float) -> None:
    with pytest.raises(ValueError, match="factor"):
        ExponentialBackoff(factor=value)


@given(
    value=st.floats(max_value=-1e-12, allow_infinity=False)
    | st.floats(min_value=1.0, allow_infinity=False)
)
def test_jitter_outside_zero_one_is_rejected(value: float) -> None:
    with pytest.raises(ValueError, match="jitter"):
        ExponentialBackoff(jitter=value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": math.nan},
        {"factor": math.nan},
        {"cap": math.nan},
        {"base": math.inf},
        {"cap": math.inf},
        {"jitter": math.nan},
        {"jitter": math.inf},
    ],
    ids=["base-nan", "factor-nan", "cap-nan", "base-inf", "cap-inf", "jitter-nan", "jitter-inf"],
)
def test_non_finite_parameters_are_rejected(kwargs: dict[str, float]) -> None:
    # Otherwise they fail later, inside a worker: NaN or inf delays, OverflowError
    # (cap=inf, attempts >= 1025) or "math domain error" (base=inf).
    with pytest.raises(ValueError):
        ExponentialBackoff(**kwargs)


# -- spread ------------------------------------------------------------------------------


def test_delays_for_the_same_attempt_are_spread_not_in_lockstep() -> None:
    policy = ExponentialBackoff(base=10.0, factor=2.0, cap=1e6, jitter=0.25)
    nominal = policy.nominal(3)
    assert nominal == 40.0
    delays = [policy.delay(3) for _ in range(10_000)]
    spread = nominal * policy.jitter
    # A uniform draw over [-spread, spread] has standard deviation spread / sqrt(3).
    assert statistics.stdev(delays) > 0.8 * spread / math.sqrt(3)
    assert len(set(delays)) > 9_900
    assert statistics.fmean(delays) == pytest.approx(nominal, rel=0.02)
    # Both ends of the band are used.
    assert min(delays) < nominal - 0.8 * spread
    assert max(delays) > nominal + 0.8 * spread


def test_delays_at_the_cap_are_still_spread() -> None:
    # Past the cap the nominal delay is the cap itself; jitter must still spread the retries
    # (downwards), or every job that failed in the same batch retries at the same instant.
    policy = ExponentialBackoff(base=1.0, factor=2.0, cap=3600.0, jitter=0.25)
    delays = [policy.delay(50) for _ in range(10_000)]
    assert all(3600.0 * 0.75 <= d <= 3600.0 for d in delays)
    # Uniform over the 900 s below the cap would have a standard deviation of 900 / sqrt(12).
    assert statistics.stdev(delays) > 0.8 * 900 / math.sqrt(12)
    at_cap = sum(1 for d in delays if d == 3600.0)
    assert at_cap < 100, f"{at_cap} of 10000 delays are exactly the cap"


def test_separate_policies_do_not_share_a_random_sequence() -> None:
    first, second = ExponentialBackoff(), ExponentialBackoff()
    assert [first.delay(5) for _ in range(20)] != [second.delay(5) for _ in range(20)]


def test_a_seeded_rng_makes_delays_reproducible() -> None:
    one = ExponentialBackoff(rng=random.Random(7))
    two = ExponentialBackoff(rng=random.Random(7))
    assert [one.delay(a) for a in range(1, 30)] == [two.delay(a) for a in range(1, 30)]


# -- FixedDelay --------------------------------------------------------------------------


@given(
    seconds=st.floats(min_value=0.0, max_value=1e6),
    attempts=st.integers(min_value=1, max_value=10**9),
)
def test_fixed_delay_is_the_same_for_every_attempt(seconds: float, attempts: int) -> None:
    assert FixedDelay(seconds).delay(attempts) == seconds


def test_fixed_delay_zero_and_equality() -> None:
    assert FixedDelay(0).delay(1) == 0
    assert FixedDelay(5.0) == FixedDelay(5.0)
    with pytest.raises(AttributeError):
        FixedDelay(5.0).seconds = 1.0  # type: ignore[misc]
