"""Retry policies: how long a failed job waits before its next attempt."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Protocol


class RetryPolicy(Protocol):
    """Decides the delay before the next attempt after ``attempts`` failed ones."""

    def delay(self, attempts: int) -> float:
        """Seconds to wait before the next attempt; ``attempts`` counts the failed ones (>= 1)."""
        ...


@dataclass(frozen=True)
class ExponentialBackoff:
    """``base * factor ** (attempts - 1)`` seconds, capped at ``cap``, spread by +/- ``jitter``.

    With the defaults the waits are about 1, 2, 4, 8 ... seconds, never more than an hour,
    each moved at random by up to 25 % so that jobs that failed together do not retry together.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 3600.0
    jitter: float = 0.25
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not all(math.isfinite(v) for v in (self.base, self.factor, self.cap, self.jitter)):
            raise ValueError("backoff parameters must be finite numbers")
        if self.base < 0 or self.cap < 0:
            raise ValueError("backoff base and cap must be >= 0")
        if self.factor < 1:
            raise ValueError("backoff factor must be >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("backoff jitter must be in [0, 1)")

    def nominal(self, attempts: int) -> float:
        """The delay before jitter."""
        exponent = max(attempts, 1) - 1
        if self.base == 0 or self.cap == 0:
            return 0.0
        # Compare logarithms first: factor ** exponent overflows long before attempts run out.
        if self.factor > 1 and exponent * math.log(self.factor) > math.log(self.cap) - math.log(
            self.base
        ):
            return self.cap
        growth = exponent * math.log(self.factor)
        if growth < 700:  # factor ** exponent fits in a float: exact for the usual cases
            return float(min(self.cap, self.base * self.factor**exponent))
        # A tiny base times a huge power: multiply in log space, the power alone overflows.
        return float(min(self.cap, math.exp(math.log(self.base) + growth)))

    def delay(self, attempts: int) -> float:
        nominal = self.nominal(attempts)
        # Draw inside the band rather than clamping it, so delays at the cap are spread too.
        low = nominal * (1 - self.jitter)
        high = min(self.cap, nominal * (1 + self.jitter))
        return max(0.0, self.rng.uniform(low, high))


@dataclass(frozen=True)
class FixedDelay:
    """The same wait before every retry."""

    seconds: float

    def delay(self, attempts: int) -> float:
        return self.seconds
