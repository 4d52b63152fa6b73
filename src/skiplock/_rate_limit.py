"""Rate limits of queues: at most ``limit`` job starts per ``period`` seconds, across all workers.

A queue's budget is a bucket of ``limit`` starts, refilled continuously at ``limit / period``
per second and spent by claims (see ``queue_rate_budget`` in ``sql/runtime.sql``).  So the
rate averages ``limit`` per ``period``; a queue that was idle may start up to ``limit`` jobs at
once, and in any window of ``period`` seconds at most ``2 * limit`` start.  Claims of a
rate-limited queue are serialised per queue (as with a concurrency limit), never claimed ahead,
and the limit applies to both worker models.  A worker finds the budget refilled at its next
claim of the queue: when a slot frees, or within one poll interval.

Written ``N/UNIT`` as for Celery's ``rate_limit`` (``10/s``, ``100/m``, ``1000/h``) or
``N/SECONDS`` (``100/60``); ``none`` removes the limit.  A concurrency limit is written as a
whole number, or ``none`` (:func:`parse_concurrency_limit`).  The CLI (``skiplock limit``,
``skiplock rate``) and the dashboard read both with these.  Pure: no I/O.
"""

from __future__ import annotations

import math
import re

from skiplock._db.bounds import INT_MAX
from skiplock.errors import ConfigurationError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_WRITTEN = re.compile(r"\s*(\d+)\s*/\s*([smhd]|\d+(?:\.\d+)?)\s*")


def parse_rate(text: str) -> tuple[int, float] | None:
    """``"100/m"`` -> ``(100, 60.0)``; ``"none"`` -> None; else :class:`ConfigurationError`."""
    if text.strip().lower() == "none":
        return None
    match = _WRITTEN.fullmatch(text)
    if match is None:
        raise ConfigurationError(
            f"rate {text!r}: write N/s, N/m, N/h, N/d or N/SECONDS (e.g. 100/m, 5/30), or none"
        )
    limit, unit = int(match.group(1)), match.group(2)
    period = UNITS[unit] if unit in UNITS else float(unit)
    check_rate_limit(limit, period)
    return limit, period


def parse_concurrency_limit(text: str) -> int | None:
    """``"5"`` -> 5; ``"none"`` -> None (no limit); else :class:`ConfigurationError`."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= INT_MAX:
        raise ConfigurationError(f"must be an integer from 1 to {INT_MAX} or 'none'")
    return value


def check_rate_limit(limit: int | None, period: float) -> None:
    """A limit of at least one start per a finite, positive period (None: no limit)."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= INT_MAX:
        raise ConfigurationError(
            f"a rate limit is a whole number of starts >= 1 (at most {INT_MAX}), got {limit!r}"
        )
    if (
        isinstance(period, bool)
        or not isinstance(period, int | float)
        or not math.isfinite(period)
        or period <= 0
    ):
        raise ConfigurationError(f"a rate limit's period is seconds > 0, got {period!r}")


def describe(limit: int, period: float) -> str:
    """``at most 100 starts per 60s``."""
    return f"at most {limit} starts per {period:g}s"


def written(limit: int, period: float) -> str:
    """A rate limit as :func:`parse_rate` reads it: ``100/m``, or ``5/30``."""
    for unit, seconds in UNITS.items():
        if period == seconds:
            return f"{limit}/{unit}"
    return f"{limit}/{period:g}"
