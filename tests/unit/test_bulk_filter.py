"""The filters and statuses of a bulk retry or cancel: checked before anything is sent."""

from __future__ import annotations

import math

import pytest

from skiplock import InvalidName, JobStatus
from skiplock.bulk import JobFilter, retry_statuses


def test_a_filter_checks_its_names_and_its_time_window() -> None:
    assert JobFilter("mail", "mail.send", 60).params() == {
        "queue": "mail",
        "task": "mail.send",
        "finished_within": 60,
        "older_than": None,
    }
    assert JobFilter().params() == {
        "queue": None,
        "task": None,
        "finished_within": None,
        "older_than": None,
    }
    with pytest.raises(InvalidName, match="invalid queue name"):
        JobFilter(queue="two words")
    with pytest.raises(InvalidName, match="invalid task name"):
        JobFilter(task="")
    for bad in (0, -1, math.nan, math.inf, "60", True):
        with pytest.raises(ValueError, match="finished_within"):
            JobFilter(finished_within=bad)  # type: ignore[arg-type]
    assert JobFilter(older_than=0).params()["older_than"] == 0  # every finished job
    for bad in (-1, math.nan, math.inf, "60", True):
        with pytest.raises(ValueError, match="older_than"):
            JobFilter(older_than=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="older_than must be less than finished_within"):
        JobFilter(finished_within=60, older_than=60)  # a window no job finished in


def test_a_filter_describes_itself_for_messages() -> None:
    assert JobFilter().describe() == ""
    assert JobFilter("mail").describe() == " of queue mail"
    assert JobFilter("mail", "mail.send", 3600).describe() == (
        " of queue mail, task mail.send, finished in the last 3600s"
    )
    assert JobFilter(older_than=86400).describe() == " finished over 86400s ago"
    assert JobFilter("mail", None, 3600, 60).describe() == (
        " of queue mail, finished in the last 3600s and over 60s ago"
    )


def test_only_failed_and_cancelled_jobs_can_be_retried() -> None:
    assert retry_statuses(["failed"]) == ["failed"]
    assert retry_statuses([JobStatus.CANCELLED, "failed", "cancelled"]) == ["cancelled", "failed"]
    for bad in (["done"], ["pending"], ["nonsense"]):
        with pytest.raises(ValueError):
            retry_statuses(bad)
    with pytest.raises(ValueError, match="at least one status"):
        retry_statuses([])
