"""Which job events a worker logs at which level."""

from __future__ import annotations

import logging

from skiplock.events import finished_level


def test_routine_outcomes_are_debug_and_trouble_is_not() -> None:
    assert finished_level("done") == finished_level("snooze") == logging.DEBUG
    assert {finished_level(o) for o in ("retry", "cancelled", "release")} == {logging.INFO}
    assert finished_level("failed") == finished_level("lost") == logging.WARNING
