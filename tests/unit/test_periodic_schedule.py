"""Periodic schedules (skiplock._runtime.periodic.Schedule): tick arithmetic; pure, no database."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from itertools import pairwise

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from skiplock import ConfigurationError
from skiplock._runtime.periodic import Schedule

US = timedelta(microseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def micros(dt: datetime) -> int:
    return (dt - EPOCH) // US


# -- every= ----------------------------------------------------------------------------------


def test_every_ticks_on_multiples_of_the_interval_since_the_epoch() -> None:
    s = Schedule(every=300)
    now = at(2024, 1, 1, 12, 7, 30)
    assert s.latest_tick(now) == at(2024, 1, 1, 12, 5)
    assert s.next_tick(now) == at(2024, 1, 1, 12, 10)
    assert s.previous_tick(at(2024, 1, 1, 12, 5)) == at(2024, 1, 1, 12, 0)


def test_every_exactly_on_a_tick_is_that_tick() -> None:
    s = Schedule(every=60)
    on = at(2024, 1, 1, 12, 5)
    assert s.latest_tick(on) == on
    assert s.next_tick(on) == at(2024, 1, 1, 12, 6)
    assert s.latest_tick(on - US) == at(2024, 1, 1, 12, 4)
    assert s.latest_tick(on + US) == on


def test_every_ignores_the_timezone_of_now() -> None:
    s = Schedule(every=3600)
    berlin = timezone(timedelta(hours=1))
    now = datetime(2024, 1, 1, 13, 30, tzinfo=berlin)  # 12:30 UTC
    assert s.latest_tick(now) == at(2024, 1, 1, 12)
    assert s.next_tick(now) == at(2024, 1, 1, 13)


# -- cron= -----------------------------------------------------------------------------------


def test_cron_latest_next_previous_on_known_instants() -> None:
    s = Schedule(cron="*/5 * * * *")
    now = at(2024, 1, 1, 12, 7, 30)
    assert s.latest_tick(now) == at(2024, 1, 1, 12, 5)
    assert s.next_tick(now) == at(2024, 1, 1, 12, 10)
    assert s.previous_tick(at(2024, 1, 1, 12, 5)) == at(2024, 1, 1, 12, 0)


def test_cron_exactly_on_a_tick_and_a_microsecond_either_side() -> None:
    s = Schedule(cron="*/5 * * * *")
    on = at(2024, 1, 1, 12, 5)
    assert s.latest_tick(on) == on
    assert s.next_tick(on) == at(2024, 1, 1, 12, 10)  # strictly after
    assert s.latest_tick(on - US) == at(2024, 1, 1, 12, 0)
    assert s.latest_tick(on + US) == on
    assert s.next_tick(on - US) == on


def test_cron_daily_across_a_month_and_leap_day() -> None:
    s = Schedule(cron="0 0 * * *")
    assert s.latest_tick(at(2024, 3, 1)) == at(2024, 3, 1)
    assert s.previous_tick(at(2024, 3, 1)) == at(2024, 2, 29)
    assert s.latest_tick(at(2024, 3, 1, 0, 0, 1)) == at(2024, 3, 1)
    assert s.next_tick(at(2024, 2, 28, 23, 59, 59)) == at(2024, 2, 29)


def test_cron_is_evaluated_in_utc_whatever_the_timezone_of_now() -> None:
    s = Schedule(cron="0 12 * * *")  # noon UTC
    tokyo = timezone(timedelta(hours=9))
    now = datetime(2024, 1, 1, 22, 0, tzinfo=tokyo)  # 13:00 UTC
    assert s.latest_tick(now) == at(2024, 1, 1, 12)
    assert s.next_tick(now) == at(2024, 1, 2, 12)


# -- cron in a time zone ---------------------------------------------------------------------

BERLIN = "Europe/Berlin"


def test_cron_in_a_time_zone_ticks_at_local_wall_clock_times_as_utc_instants() -> None:
    s = Schedule(cron="0 9 * * 1-5", timezone=BERLIN)  # weekdays 09:00 in Berlin
    winter, summer = at(2026, 1, 14, 12), at(2026, 7, 15, 12)  # Wednesdays
    assert s.latest_tick(winter) == at(2026, 1, 14, 8)  # CET, UTC+1
    assert s.latest_tick(summer) == at(2026, 7, 15, 7)  # CEST, UTC+2
    assert s.next_tick(at(2026, 1, 16, 12)) == at(2026, 1, 19, 8)  # Friday -> Monday
    assert s.previous_tick(at(2026, 1, 19, 8)) == at(2026, 1, 16, 8)
    assert s.latest_tick(winter).tzinfo is UTC
    assert Schedule(cron="0 9 * * *").latest_tick(winter) == at(2026, 1, 14, 9)  # UTC default


def test_cron_across_daylight_saving_time_changes_runs_like_cron() -> None:
    daily = Schedule(cron="30 2 * * *", timezone=BERLIN)
    # 2026-03-29: clocks go from 02:00 to 03:00, so 02:30 never happens: it runs at 03:00.
    assert daily.next_tick(at(2026, 3, 28, 12)) == at(2026, 3, 29, 1)  # 03:00 CEST
    assert daily.previous_tick(at(2026, 3, 30, 0, 30)) == at(2026, 3, 29, 1)
    # 2026-10-25: 02:00-03:00 happens twice; 02:30 runs once, the first time (CEST).
    ticks = [daily.next_tick(at(2026, 10, 24, 12))]
    ticks.append(daily.next_tick(ticks[-1]))
    assert ticks == [at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]
    assert daily.latest_tick(at(2026, 10, 25, 1, 45)) == at(2026, 10, 25, 0, 30)
    # An hourly schedule keeps ticking every hour of real time through both changes.
    hourly = Schedule(cron="0 * * * *", timezone=BERLIN)
    tick, seen = at(2026, 10, 24, 22), []
    for _ in range(5):
        tick = hourly.next_tick(tick)
        seen.append(tick)
    assert [t - s for s, t in pairwise(seen)] == [timedelta(hours=1)] * 4


def test_a_time_zone_schedule_is_the_same_for_workers_in_any_zone() -> None:
    s = Schedule(cron="15 18 * * *", timezone="America/New_York")
    utc_now = at(2026, 6, 1, 23)
    tokyo_now = utc_now.astimezone(timezone(timedelta(hours=9)))
    assert s.latest_tick(utc_now) == s.latest_tick(tokyo_now) == at(2026, 6, 1, 22, 15)
    assert s.ticks_due(tokyo_now) == []  # 45 minutes ago: past the misfire grace
    assert s.ticks_due(at(2026, 6, 1, 22, 15, 30)) == [at(2026, 6, 1, 22, 15)]


# -- ticks_due -------------------------------------------------------------------------------


def test_ticks_due_is_the_latest_tick_within_the_misfire_grace() -> None:
    s = Schedule(every=60, misfire_grace=10)
    assert s.ticks_due(at(2024, 1, 1, 12, 5, 0)) == [at(2024, 1, 1, 12, 5)]
    assert s.ticks_due(at(2024, 1, 1, 12, 5, 10)) == [at(2024, 1, 1, 12, 5)]


def test_a_tick_older_than_the_misfire_grace_is_skipped() -> None:
    s = Schedule(every=60, misfire_grace=10)
    assert s.ticks_due(at(2024, 1, 1, 12, 5, 11)) == []
    cron = Schedule(cron="*/5 * * * *", misfire_grace=60)
    assert cron.ticks_due(at(2024, 1, 1, 12, 7, 30)) == []
    assert cron.ticks_due(at(2024, 1, 1, 12, 5, 59)) == [at(2024, 1, 1, 12, 5)]


def test_no_catch_up_burst_by_default_however_long_the_downtime() -> None:
    s = Schedule(every=1.0)
    # Whatever was missed before, at most the latest tick is due.
    assert s.ticks_due(at(2024, 1, 1, 12, 0, 0, 500_000)) == [at(2024, 1, 1, 12)]


def test_catch_up_adds_that_many_earlier_ticks_oldest_first() -> None:
    s = Schedule(every=60, catch_up=3)
    assert s.ticks_due(at(2024, 1, 1, 12, 5, 5)) == [
        at(2024, 1, 1, 12, 2),
        at(2024, 1, 1, 12, 3),
        at(2024, 1, 1, 12, 4),
        at(2024, 1, 1, 12, 5),
    ]
    cron = Schedule(cron="0 * * * *", catch_up=2, misfire_grace=3600)
    assert cron.ticks_due(at(2024, 1, 1, 12, 30)) == [
        at(2024, 1, 1, 10),
        at(2024, 1, 1, 11),
        at(2024, 1, 1, 12),
    ]


def test_catch_up_never_skips_a_tick_newer_than_one_it_catches_up() -> None:
    """After downtime longer than the grace, catch_up=N asks for "the last few" missed ticks
    (periodic.py's module doc): the newest missed tick cannot be dropped while older ones run."""
    s = Schedule(cron="*/5 * * * *", catch_up=2, misfire_grace=60)
    due = s.ticks_due(at(2024, 1, 1, 12, 7, 30))  # latest tick 12:05 is 150 s old
    assert due, "catch_up=2 asked for catch-up runs"
    assert due[-1] == at(2024, 1, 1, 12, 5), f"newest missed tick left out: {due}"
    tick = due[0]
    for later in due[1:]:
        assert s.previous_tick(later) == tick, f"not consecutive ticks: {due}"
        tick = later


def test_ticks_due_has_no_duplicates_and_is_sorted() -> None:
    s = Schedule(every=1.0, catch_up=5)
    due = s.ticks_due(at(2024, 1, 1, 12, 0, 0, 1))
    assert due == sorted(set(due))
    assert len(due) == 6


# -- configuration errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"cron": "* * * * *", "every": 60},
        {"cron": "not a cron"},
        {"cron": "61 * * * *"},
        {"cron": "* * * *"},
        {"every": 0},
        {"every": -1},
        {"every": math.nan},
        {"every": math.inf},
        {"every": 60, "catch_up": -1},
        {"every": 60, "misfire_grace": -1},
        {"cron": "0 9 * * *", "timezone": "Mars/Olympus_Mons"},
        {"cron": "0 9 * * *", "timezone": "../etc/passwd"},
        {"cron": "0 9 * * *", "timezone": 1},
        {"every": 60, "timezone": "Europe/Berlin"},
    ],
    ids=repr,
)
def test_bad_schedules_are_configuration_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        Schedule(**kwargs)  # type: ignore[arg-type]


# -- properties ------------------------------------------------------------------------------

instants = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(every=st.integers(min_value=1, max_value=7 * 86400), now=instants)
@example(every=1, now=at(2024, 1, 1))
@example(every=60, now=at(2024, 1, 1, 0, 0, 59, 999_999))
def test_latest_tick_of_an_integer_interval(every: int, now: datetime) -> None:
    s = Schedule(every=every)
    latest = s.latest_tick(now)
    assert latest <= now < latest + timedelta(seconds=every)
    assert micros(latest) % (every * 1_000_000) == 0
    assert s.next_tick(now) == latest + timedelta(seconds=every)
    assert s.next_tick(now) > now


@given(
    every=st.sampled_from([0.1, 0.2, 0.25, 0.3, 0.7, 1.5, 2.5]),
    seconds=st.integers(min_value=10**8, max_value=4 * 10**9),  # 1973 .. 2096
    extra_ticks=st.integers(min_value=0, max_value=99),
    offset=st.floats(min_value=0.0, max_value=0.999999),
)
@example(every=0.1, seconds=1_700_000_000, extra_ticks=3, offset=0.0)
def test_latest_tick_of_a_fractional_interval(
    every: float, seconds: int, extra_ticks: int, offset: float
) -> None:
    """Exactly on a tick (offset 0) included: now is in [latest, latest + every)."""
    every_us = round(every * 1_000_000)
    tick_us = (seconds * 1_000_000 // every_us + extra_ticks) * every_us
    now = EPOCH + (tick_us + math.floor(offset * every_us)) * US
    s = Schedule(every=every)
    latest = s.latest_tick(now)
    assert micros(latest) % every_us == 0, f"{latest} is not a multiple of {every}s"
    assert latest <= now < latest + timedelta(seconds=every), f"now={now} latest={latest}"
    assert s.next_tick(now) > now


@given(
    cron=st.sampled_from(["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 0 1 * *", "15 9 * * 1"]),
    now=instants,
)
def test_cron_latest_is_the_last_tick_at_or_before_now(cron: str, now: datetime) -> None:
    s = Schedule(cron=cron)
    latest = s.latest_tick(now)
    following = s.next_tick(latest)
    assert latest <= now < following
    assert s.previous_tick(following) == latest
    assert s.next_tick(now) == following


def test_app_periodic_takes_a_time_zone() -> None:
    from skiplock import App

    app = App("postgresql://nobody@localhost/nothing")

    @app.periodic(cron="0 9 * * *", timezone=BERLIN, name="morning")
    def morning() -> None: ...

    (periodic,) = app.periodic_tasks.values()
    assert periodic.schedule.latest_tick(at(2026, 1, 14, 12)) == at(2026, 1, 14, 8)
    with pytest.raises(ConfigurationError, match="unknown time zone 'Nowhere/City'"):
        app.periodic(cron="0 9 * * *", timezone="Nowhere/City")
