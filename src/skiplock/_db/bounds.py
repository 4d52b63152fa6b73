"""The bounds of what enqueue accepts (names, keys, times, integers) and their checks; the
jobs table enforces the same bounds as constraints.  Pure, no I/O."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

from skiplock.errors import InvalidName

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_META_BYTES = 8 * 1024  # a job's meta, as JSON

# The bounds of what enqueue accepts, which the jobs table enforces too (its jobs_bound_*
# constraints, migration 0015; a test keeps both in step).  docs/security.md explains each.
# An entity or idempotency key, in characters: 4 bytes each at most, well within what a btree
# index row holds (about 2.7 kB), so a claim can always index a running job's key.
MAX_KEY_LENGTH = 512
# Nesting of objects and arrays in a payload, meta or result (the value itself is level 1):
# deep enough for any real data, shallow enough for every decoder and renderer on the way.
MAX_JSON_DEPTH = 64
# Digits of an integer in a payload, meta or result: Python's int-from-text limit, which
# json.loads would otherwise hit (jsonb writes any number, 1e400 too, without an exponent).
MAX_JSON_INT_DIGITS = 4300
# run_at and expires_at: times that PostgreSQL and Python's datetime both represent, a day
# inside datetime's years 1-9999 so that they stay representable in every time zone.
EARLIEST_TIME = datetime(1, 1, 2, tzinfo=UTC)
LATEST_TIME = datetime(9999, 12, 30, tzinfo=UTC)
INT_MAX = 2**31 - 1  # PostgreSQL's integer: priorities, attempts, queue limits
BIGINT_MAX = 2**63 - 1  # PostgreSQL's bigint: job ids
# A queue's aging step, in seconds (the CHECK queues_bound_aging_step, migration 0029): about
# 31 years, far past any wait worth aging, and well inside what the leader's interval and time
# arithmetic hold (1e300 failed its aging statement, for every queue).
AGING_STEP_MAX = 1e9
TIME_RANGE = f"{EARLIEST_TIME.date().isoformat()} to {LATEST_TIME.date().isoformat()} UTC"
_JSON_BOUNDS = (
    f"at most {MAX_JSON_DEPTH} levels deep, integers of at most {MAX_JSON_INT_DIGITS} digits"
)
# The jobs table's constraints for these bounds, by name, in words.
TABLE_BOUNDS = {
    "jobs_bound_queue": "a queue name of 1-63 letters, digits, '_', '.', ':' or '-'",
    "jobs_bound_task": "a task name of 1-200 letters, digits, '_', '.', ':' or '-'",
    "jobs_bound_entity_key": f"an entity_key of 1-{MAX_KEY_LENGTH} characters",
    "jobs_bound_idempotency_key": f"an idempotency_key of 1-{MAX_KEY_LENGTH} characters",
    "jobs_bound_fair_key": f"a fair_key of 1-{MAX_KEY_LENGTH} characters",
    "jobs_bound_limit_key": f"a limit_key of 1-{MAX_KEY_LENGTH} characters",
    "jobs_bound_run_at": f"run_at within {TIME_RANGE}",
    "jobs_bound_expires_at": f"expires_at within {TIME_RANGE}",
    "jobs_bound_payload": f"a payload {_JSON_BOUNDS}",
    "jobs_bound_meta": f"a meta {_JSON_BOUNDS}",
}

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")
_TASK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")


def check_aging_step(step: float | None) -> float | None:
    """A queue's aging step as a float: seconds, more than 0 and at most AGING_STEP_MAX (None:
    no aging); anything else, NaN, infinities, bools and ints past a float too, is refused."""
    if step is None:
        return None
    if (
        isinstance(step, bool)
        or not isinstance(step, int | float)
        or not 0 < step <= AGING_STEP_MAX
    ):
        raise ValueError(
            f"aging step must be a number of seconds > 0 and <= {AGING_STEP_MAX:g}, not {step!r}"
        )
    return float(step)


def check_queue_name(name: str) -> str:
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid queue name {name!r}: use 1-63 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_task_name(name: str) -> str:
    if not isinstance(name, str) or not _TASK_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid task name {name!r}: use letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or '_' (at most 200 characters)"
        )
    return name


def check_schema_name(name: str) -> str:
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid schema name {name!r}: use 1-40 lower-case letters, digits or '_', "
            "not starting with a digit"
        )
    return name


def check_priority(priority: int) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool) or abs(priority) >= 2**31:
        raise ValueError(f"priority must be a 32-bit integer, got {priority!r}")
    return priority


def check_max_attempts(max_attempts: int) -> int:
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts < 2**31
    ):
        raise ValueError(f"max_attempts must be an integer >= 1 (32-bit), got {max_attempts!r}")
    return max_attempts


def check_seconds_ahead(seconds: Any, label: str, *, positive: bool = False) -> float:
    """A number of seconds from now (``label`` names it in errors): finite, >= 0 (> 0 if
    ``positive``), not a bool, and landing no later than LATEST_TIME by this machine's clock."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"{label} must be a number of seconds, got {seconds!r}")
    try:
        value = float(seconds)
    except OverflowError:  # an int beyond any float: far past the bound
        value = math.inf if seconds > 0 else -math.inf
    else:
        if not math.isfinite(value):
            value = math.nan
    if math.isnan(value) or value < 0 or (positive and value == 0):
        what = "a positive number of seconds" if positive else "a finite number of seconds >= 0"
        raise ValueError(f"{label} must be {what}, got {seconds!r}")
    if value > (LATEST_TIME - datetime.now(UTC)).total_seconds():
        raise ValueError(
            f"{label} of {value:g} s lands after {LATEST_TIME.date().isoformat()} UTC: a job's "
            f"times must lie within {TIME_RANGE}"
        )
    return value


def check_delay(delay: float | None) -> float | None:
    return None if delay is None else check_seconds_ahead(delay, "delay")


def check_time(value: Any, label: str) -> datetime:
    """A timezone-aware datetime within EARLIEST_TIME..LATEST_TIME."""
    if not isinstance(value, datetime):
        raise ValueError(f"{label} must be a datetime, got {value!r}")
    if value.utcoffset() is None:
        raise ValueError(f"{label} must be timezone-aware (e.g. datetime.now(timezone.utc))")
    if not EARLIEST_TIME <= value <= LATEST_TIME:
        raise ValueError(f"{label} {value.isoformat()} is outside {TIME_RANGE}")
    return value


def check_key(key: Any, label: str) -> str | None:
    """An entity or idempotency key: None, or 1 to MAX_KEY_LENGTH characters that PostgreSQL's
    text holds (no NUL, no lone surrogate)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise ValueError(f"{label} must be a non-empty string, got {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(
            f"{label} is {len(key)} characters, over the limit of {MAX_KEY_LENGTH} characters "
            "(hash a longer key first)"
        )
    if "\x00" in key:
        raise ValueError(f"{label} contains a NUL character, which PostgreSQL text rejects")
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{label} contains text that is not valid Unicode (a lone surrogate)"
            ) from None
    return key
