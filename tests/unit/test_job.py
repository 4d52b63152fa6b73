"""Job.from_tuple and Job.from_claimed_row: the fast ways a worker builds a Job from a row."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from skiplock.job import Claim, Job, JobStatus, UnrunnableJob

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ROW = (7, "mail", "send", {"to": "a@b.c"}, "running", 2, NOW, 1, 5, "w1", NOW, NOW, "k", None, NOW)


def test_from_tuple_equals_the_constructor() -> None:
    made = Job(7, "mail", "send", {"to": "a@b.c"}, JobStatus.RUNNING, 2, NOW, 1, 5, "w1", NOW,
               NOW, "k", None, NOW)  # fmt: skip
    job = Job.from_tuple(ROW)
    assert job == made
    assert repr(job) == repr(made)
    assert job.status is JobStatus.RUNNING
    assert (job.last_error, job.finished_at) == (None, None)
    assert dataclasses.asdict(job) == dataclasses.asdict(made)


def test_from_tuple_takes_the_optional_fields_when_the_row_has_them() -> None:
    job = Job.from_tuple((*ROW[:4], "failed", *ROW[5:], {"trace": "t"}, NOW, "boom", NOW))
    assert job.status is JobStatus.FAILED
    assert (job.meta, job.expires_at, job.last_error, job.finished_at) == (
        {"trace": "t"},
        NOW,
        "boom",
        NOW,
    )
    assert (Job.from_tuple(ROW).meta, Job.from_tuple(ROW).expires_at) == (None, None)


def test_a_job_from_a_row_is_still_frozen() -> None:
    job = Job.from_tuple(ROW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.attempts = 2  # type: ignore[misc]
    assert dataclasses.replace(job, attempts=2).attempts == 2


def test_an_unknown_status_is_an_error() -> None:
    with pytest.raises(KeyError):
        Job.from_tuple((*ROW[:4], "exploded", *ROW[5:]))


def test_a_claimed_row_brings_its_payload_as_json_text() -> None:
    claimed = Job.from_claimed_row((*ROW[:3], '{"to": "a@b.c", "n": [1, 2.5, null]}', *ROW[4:]))
    assert claimed.payload == {"to": "a@b.c", "n": [1, 2.5, None]}
    assert claimed == Job.from_tuple((*ROW[:3], claimed.payload, *ROW[4:]))
    assert claimed.status is JobStatus.RUNNING and claimed.last_error is None


def test_a_claim_names_its_owner_attempt_and_time() -> None:
    job = Job.from_tuple(ROW)
    assert job.claim == Claim(7, 1, "w1", NOW)
    with pytest.raises(ValueError, match="not claimed"):
        _ = dataclasses.replace(job, locked_at=None).claim
    with pytest.raises(ValueError, match="not claimed"):
        _ = dataclasses.replace(job, locked_by=None).claim


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ("[" * 12_000 + "]" * 12_000, "nested too deep for Python's JSON decoder"),
        ('{"n": ' + "9" * 5000 + "}", "Exceeds the limit (4300 digits)"),
    ],
)
def test_a_claimed_row_whose_payload_cannot_be_decoded_is_unrunnable(
    payload: str, says: str
) -> None:
    job = Job.from_claimed_row((*ROW[:3], payload, *ROW[4:]))
    assert isinstance(job, UnrunnableJob)
    assert job.reason.startswith("payload could not be decoded: ") and says in job.reason
    assert job.payload == {} and job.claim == Claim(7, 1, "w1", NOW)
    # The held-lock model replaces a claimed job's attempts (dead starts): it stays unrunnable.
    again = dataclasses.replace(job, attempts=3)
    assert isinstance(again, UnrunnableJob) and again.reason == job.reason


def test_a_second_reason_joins_the_first() -> None:
    job = UnrunnableJob.of_row(ROW, "payload could not be decoded: x")
    both = UnrunnableJob.of_job(job, "run_at is -infinity")
    assert both.reason == "run_at is -infinity; payload could not be decoded: x"
    assert both.claim == job.claim
