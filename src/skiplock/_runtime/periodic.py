"""Periodic tasks: a cron expression or a fixed interval, one job per tick across all workers.

The maintenance leader enqueues the job of the latest tick that has come; the tick's row in
``periodic_ticks`` makes a second enqueue of the same tick impossible, even from another
worker.  A tick is enqueued up to ``misfire_grace`` seconds late; ticks missed for longer (no
worker ran) are skipped, with no burst of catch-up runs, unless ``catch_up`` asks for the last
few of them.  Ticks fall by the database server's clock (:class:`ServerClock`), on which every
worker agrees, not by each worker's own.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from skiplock.errors import ConfigurationError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Schedule:
    """When a periodic task runs: ``cron`` (5 fields, read in ``timezone``, UTC by default)
    or ``every`` seconds.

    In a time zone with daylight saving time, cron does what cron does: a time the clocks
    skip runs at the first moment after the gap (``30 2 * * *`` at 03:00 on the day clocks go
    forward), a time they repeat runs once, at its first occurrence, and ``0 * * * *`` still
    ticks every hour of the instant timeline.  Ticks are instants: every worker agrees on
    them whatever its own time zone.
    """

    cron: str | None = None
    every: float | None = None
    catch_up: int = 0
    misfire_grace: float = 60.0
    timezone: str | None = None  # an IANA name such as "Europe/Berlin"; None: UTC

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
        if self.timezone is not None:
            if self.cron is None:
                raise ConfigurationError("timezone= applies to cron= schedules, not every=")
            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError, TypeError):
                raise ConfigurationError(
                    f"unknown time zone {self.timezone!r}: use an IANA name such as "
                    "'Europe/Berlin' (a system without a time zone database needs "
                    "`pip install tzdata`)"
                ) from None

    @cached_property
    def _zone(self) -> tzinfo:
        return UTC if self.timezone is None else ZoneInfo(self.timezone)

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
        start = (now + timedelta(microseconds=1)).astimezone(self._zone)
        return next(CronSim(self.cron, start, reverse=True)).astimezone(UTC)

    @property
    def _step_micros(self) -> int:
        assert self.every is not None
        return max(1, round(self.every * 1_000_000))

    def previous_tick(self, tick: datetime) -> datetime:
        if self.every is not None:
            return tick - timedelta(microseconds=self._step_micros)
        assert self.cron is not None
        return next(CronSim(self.cron, tick.astimezone(self._zone), reverse=True)).astimezone(UTC)

    def next_tick(self, now: datetime) -> datetime:
        if self.every is not None:
            return self.latest_tick(now) + timedelta(microseconds=self._step_micros)
        assert self.cron is not None
        return next(CronSim(self.cron, now.astimezone(self._zone))).astimezone(UTC)


@dataclass(frozen=True)
class PeriodicTask:
    """A registered periodic task: which task, with which payload, on which schedule."""

    name: str
    task: str
    schedule: Schedule
    payload: dict[str, Any]

    def definition(self, queue: str) -> str:
        """What makes this schedule's ticks and jobs, as JSON text: recorded with each tick, so
        that a leader can tell a schedule changed in code (periodic_reconcile)."""
        schedule = self.schedule
        return json.dumps(
            {
                "task": self.task,
                "queue": queue,
                "cron": schedule.cron,
                "every": schedule.every,
                "timezone": schedule.timezone,
                "payload": self.payload,
            },
            sort_keys=True,
            default=str,
        )


class ServerClock:
    """The database server's clock, read now and then (``record``) and carried forward on
    this process's monotonic clock, which a step of the wall clock does not move: ticks fall
    by the server's time whatever a worker's own wall clock says."""

    REFRESH = 60.0  # seconds between readings

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._server: datetime | None = None
        self._at = 0.0  # the monotonic time of the reading

    def stale(self) -> bool:
        return self._server is None or self._monotonic() - self._at >= self.REFRESH

    def record(self, server_now: datetime, sent: float, received: float) -> None:
        """A reading of the server's clock, asked at monotonic ``sent``, answered at
        ``received``: taken as read halfway."""
        self._server = server_now.astimezone(UTC)
        self._at = (sent + received) / 2

    def now(self) -> datetime | None:
        """The server's time now (None before the first reading)."""
        if self._server is None:
            return None
        return self._server + timedelta(seconds=self._monotonic() - self._at)
