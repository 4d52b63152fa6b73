"""Periodic tasks: a cron expression or a fixed interval, one job per tick across all workers.

The maintenance leader enqueues the job of the latest tick that has come; the tick's row in
``periodic_ticks`` makes a second enqueue of the same tick impossible, even from another
worker.  A tick is enqueued up to ``misfire_grace`` seconds late; ticks missed for longer (no
worker ran) are skipped, with no burst of catch-up runs, unless ``catch_up`` asks for the last
few of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cronsim import CronSim, CronSimError

from .errors import ConfigurationError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Schedule:
    """When a periodic task runs: ``cron`` (5 fields, UTC) or ``every`` seconds."""

    cron: str | None = None
    every: float | None = None
    catch_up: int = 0
    misfire_grace: float = 60.0

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise ConfigurationError("a periodic task needs exactly one of cron= or every=")
        if self.every is not None and not (math.isfinite(self.every) and self.every > 0):
            raise ConfigurationError(f"every must be a number of seconds > 0, got {self.every!r}")
        if self.cron is not None:
            try:
                CronSim(self.cron, datetime(2000, 1, 1, tzinfo=UTC))
            except CronSimError as exc:
                raise ConfigurationError(f"invalid cron expression {self.cron!r}: {exc}") from None
        if self.catch_up < 0 or self.misfire_grace < 0:
            raise ConfigurationError("catch_up and misfire_grace must be >= 0")

    def ticks_due(self, now: datetime) -> list[datetime]:
        """The ticks to enqueue at ``now``, oldest first: the latest tick if it came less than
        ``misfire_grace`` seconds ago; with ``catch_up=N``, also the N ticks before it, or, when
        the latest is past its grace (it was missed too), the latest and the N - 1 before it.
        Enqueuing is idempotent per tick, so asking again at the next poll is harmless."""
        latest = self.latest_tick(now)
        on_time = (now - latest).total_seconds() <= self.misfire_grace
        ticks = [latest]
        for _ in range(self.catch_up if on_time else self.catch_up - 1):
            ticks.append(self.previous_tick(ticks[-1]))
        if not on_time and self.catch_up == 0:
            return []
        return sorted(ticks)

    def latest_tick(self, now: datetime) -> datetime:
        """The most recent tick at or before ``now``."""
        if self.every is not None:
            # Whole microseconds: float division misplaces ticks of fractional intervals.
            since = now.astimezone(UTC) - EPOCH
            micros = (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds
            return EPOCH + timedelta(microseconds=micros - micros % self._step_micros)
        assert self.cron is not None
        # CronSim in reverse yields ticks strictly before its start; start just after now.
        return next(
            CronSim(self.cron, now.astimezone(UTC) + timedelta(microseconds=1), reverse=True)
        )

    @property
    def _step_micros(self) -> int:
        assert self.every is not None
        return max(1, round(self.every * 1_000_000))

    def previous_tick(self, tick: datetime) -> datetime:
        if self.every is not None:
            return tick - timedelta(microseconds=self._step_micros)
        assert self.cron is not None
        return next(CronSim(self.cron, tick, reverse=True))

    def next_tick(self, now: datetime) -> datetime:
        if self.every is not None:
            return self.latest_tick(now) + timedelta(microseconds=self._step_micros)
        assert self.cron is not None
        return next(CronSim(self.cron, now.astimezone(UTC)))


@dataclass(frozen=True)
class PeriodicTask:
    """A registered periodic task: which task, with which payload, on which schedule."""

    name: str
    task: str
    schedule: Schedule
    payload: dict[str, Any]
