"""Enqueue bookkeeping (skiplock._db.enqueue): options, job validation, insert outcomes.  No I/O."""

from __future__ import annotations

import math
from dataclasses import fields
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from skiplock import Enqueued, InvalidName, InvalidPayload
from skiplock._db.enqueue import (
    EnqueueOptions,
    InsertOutcome,
    NewJob,
    NewJobs,
    build_job,
    build_jobs,
    insert_params,
    shared_key_results,
)

FULL = EnqueueOptions(queue="default", priority=0, max_attempts=5)


def job(key: str | None = None, n: int = 0) -> NewJob:
    return build_job(
        "t",
        {"n": n},
        EnqueueOptions(**{**vars(FULL), "idempotency_key": key}),
        max_payload_bytes=1000,
    )


def run(
    jobs: list[NewJob],
    inserted: list[tuple[int, str | None]],
    existing: list[tuple[int, str]] | None = None,
) -> tuple[InsertOutcome, list[str]]:
    """Feed one insert round (and optionally the lookup of existing keys) like the store does."""
    outcome = InsertOutcome.start(jobs)
    assert outcome.pending_indexes() == list(range(len(jobs)))
    outcome.add_inserted(outcome.pending_indexes(), inserted)
    missing = outcome.missing_keys()
    if existing is not None:
        outcome.add_existing(existing)
    return outcome, missing


# -- InsertOutcome -----------------------------------------------------------------------


def test_no_keys_each_job_gets_the_next_id_in_order() -> None:
    outcome, missing = run([job(), job(), job()], [(10, None), (11, None), (12, None)])
    assert missing == []
    assert outcome.done() == [Enqueued(10), Enqueued(11), Enqueued(12)]


def test_all_keys_new_each_job_gets_its_own_row() -> None:
    outcome, missing = run([job("a"), job("b"), job("c")], [(20, "a"), (21, "b"), (22, "c")])
    assert missing == []
    assert outcome.done() == [Enqueued(20), Enqueued(21), Enqueued(22)]
    assert not any(r.deduplicated for r in outcome.done())


def test_key_repeated_in_the_batch_later_ones_resolve_to_the_first() -> None:
    # The insert skips later rows with a key already inserted by this statement.
    jobs = [job("k"), job(None), job("k"), job("k")]
    outcome, missing = run(jobs, [(30, "k"), (31, None)])
    assert missing == []
    assert outcome.done() == [
        Enqueued(30),
        Enqueued(31),
        Enqueued(30, deduplicated=True),
        Enqueued(30, deduplicated=True),
    ]


def test_key_held_by_an_existing_job_is_pending_until_add_existing() -> None:
    jobs = [job("held"), job(None)]
    outcome = InsertOutcome.start(jobs)
    outcome.add_inserted([0, 1], [(41, None)])
    assert outcome.pending_indexes() == [0]
    assert outcome.missing_keys() == ["held"]
    with pytest.raises(AssertionError):
        outcome.done()
    outcome.add_existing([(7, "held")])
    assert outcome.pending_indexes() == []
    assert outcome.done() == [Enqueued(7, deduplicated=True), Enqueued(41)]


def test_key_held_by_an_existing_job_and_repeated_in_the_batch() -> None:
    outcome, missing = run([job("h"), job("h")], [], existing=[(3, "h")])
    assert missing == ["h"]
    assert outcome.done() == [Enqueued(3, deduplicated=True), Enqueued(3, deduplicated=True)]


def test_mix_of_no_key_new_keys_repeats_and_existing_holders() -> None:
    jobs = [
        job(None),  # 0 -> 100
        job("new1"),  # 1 -> 101
        job("old"),  # 2 -> existing 5
        job("new1"),  # 3 -> dup of 101
        job(None),  # 4 -> 102
        job("old2"),  # 5 -> existing 6
        job("new2"),  # 6 -> 103
        job("old"),  # 7 -> existing 5
    ]
    inserted: list[tuple[int, str | None]] = [
        (100, None),
        (101, "new1"),
        (102, None),
        (103, "new2"),
    ]
    outcome, missing = run(jobs, inserted, existing=[(6, "old2"), (5, "old")])
    assert missing == ["old", "old2"]
    assert outcome.done() == [
        Enqueued(100),
        Enqueued(101),
        Enqueued(5, deduplicated=True),
        Enqueued(101, deduplicated=True),
        Enqueued(102),
        Enqueued(6, deduplicated=True),
        Enqueued(103),
        Enqueued(5, deduplicated=True),
    ]


def test_holder_finished_before_lookup_stays_pending_for_another_round() -> None:
    # The unfinished holder of "k" finished between our insert and our lookup: the lookup
    # finds nothing, the job stays pending, and the next insert round over it succeeds.
    jobs = [job(None), job("k"), job("k")]
    outcome = InsertOutcome.start(jobs)
    outcome.add_inserted([0, 1, 2], [(50, None)])
    outcome.add_existing([])
    assert outcome.pending_indexes() == [1, 2]
    outcome.add_inserted([1, 2], [(51, "k")])
    assert outcome.done() == [Enqueued(50), Enqueued(51), Enqueued(51, deduplicated=True)]


def test_missing_keys_are_unique_and_sorted() -> None:
    outcome = InsertOutcome.start([job("b"), job("a"), job("b"), job(None)])
    outcome.add_inserted([0, 1, 2, 3], [(1, None)])
    assert outcome.missing_keys() == ["a", "b"]


def test_insert_params_are_parallel_arrays_in_input_order() -> None:
    jobs = [job("x", n=1), job(None, n=2)]
    params = insert_params(jobs, "skiplock.s")
    assert params["channel"] == "skiplock.s"
    assert params["idempotency_key"] == ["x", None]
    assert params["payload"] == ['{"n":1}', '{"n":2}']
    for column in ("queue", "task", "priority", "run_at", "delay", "max_attempts", "entity_key"):
        assert len(params[column]) == 2


# -- EnqueueOptions.merged ---------------------------------------------------------------


def test_merged_takes_every_option_the_other_sets() -> None:
    base = EnqueueOptions(queue="a", priority=5, max_attempts=3, entity_key="e")
    run_at = datetime.now(UTC)
    other = EnqueueOptions(queue="b", run_at=run_at, idempotency_key="i")
    merged = base.merged(other)
    assert merged == EnqueueOptions(
        queue="b", priority=5, run_at=run_at, max_attempts=3, entity_key="e", idempotency_key="i"
    )
    # Neither input changed.
    assert base.queue == "a" and other.priority is None


def test_merged_with_falsy_but_set_values_still_overrides() -> None:
    base = EnqueueOptions(queue="a", priority=5, delay=10.0, max_attempts=3)
    merged = base.merged(EnqueueOptions(priority=0, delay=0))
    assert merged.priority == 0
    assert merged.delay == 0


def test_merged_with_empty_options_is_unchanged_and_covers_every_field() -> None:
    values: dict[str, Any] = {
        "queue": "q",
        "priority": 1,
        "run_at": datetime.now(UTC),
        "delay": None,
        "max_attempts": 2,
        "entity_key": "e",
        "idempotency_key": "i",
        "meta": {"trace": "t"},
        "depends_on": (3, 4),
        "expires": 60.0,
        "fair_key": "tenant:1",
        "limit_key": "token:1",
    }
    assert {f.name for f in fields(EnqueueOptions)} == set(values)
    full = EnqueueOptions(**values)
    assert full.merged(EnqueueOptions()) == full
    assert EnqueueOptions().merged(full) == full


def test_meta_merges_key_by_key_the_later_keys_winning() -> None:
    base = EnqueueOptions(meta={"trace": "a", "tenant": "t1"})
    merged = base.merged(EnqueueOptions(meta={"trace": "b", "request": "r"}))
    assert merged.meta == {"trace": "b", "tenant": "t1", "request": "r"}
    assert base.merged(EnqueueOptions(meta={})).meta == base.meta
    assert EnqueueOptions().merged(base).meta == base.meta


def test_depends_on_is_replaced_not_merged_and_checked_into_ids() -> None:
    base = EnqueueOptions(depends_on=[1, 2])
    assert base.merged(EnqueueOptions(depends_on=[5])).depends_on == [5]
    assert base.merged(EnqueueOptions()).depends_on == [1, 2]
    assert build(depends_on=[Enqueued(9), 4, 9, Enqueued(4, deduplicated=True)]).depends_on == (
        9,
        4,
    )
    assert build(depends_on=[]).depends_on is None and build().depends_on is None


def test_meta_is_checked_and_encoded_empty_as_nothing() -> None:
    assert build(meta={"trace": "00-abc-01", "n": 3}).meta == '{"trace":"00-abc-01","n":3}'
    assert build(meta={}).meta is None and build().meta is None
    for bad, message in (
        (["trace"], "must be a mapping with str keys"),
        ({1: "x"}, "must be a mapping with str keys"),
        ({"when": datetime.now(UTC)}, "not JSON-serialisable"),
        ({"blob": "x" * 9000}, "over the limit of 8192 bytes"),
    ):
        with pytest.raises(InvalidPayload, match=message):
            build(meta=bad)


# -- build_job ---------------------------------------------------------------------------


def build(**options: Any) -> NewJob:
    return build_job(
        "t", {"a": 1}, EnqueueOptions(**{**vars(FULL), **options}), max_payload_bytes=100
    )


def test_build_job_with_delay_as_timedelta_gives_seconds() -> None:
    assert build(delay=timedelta(minutes=2)).delay == 120.0
    assert build(delay=1.5).delay == 1.5
    assert build().delay is None and build().run_at is None


def test_build_job_accepts_aware_run_at_in_any_zone() -> None:
    at = datetime(2030, 1, 1, 12, tzinfo=timezone(timedelta(hours=5)))
    assert build(run_at=at).run_at == at


def test_build_job_run_at_and_delay_both_is_an_error() -> None:
    with pytest.raises(ValueError, match="either run_at or delay"):
        build(run_at=datetime.now(UTC), delay=5)


def test_build_job_naive_run_at_is_an_error_naming_the_fix() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        build(run_at=datetime.now())  # naive on purpose


@pytest.mark.parametrize("label", ["entity_key", "idempotency_key"])
@pytest.mark.parametrize("value", ["", 5, b"k"])
def test_build_job_empty_or_non_string_keys_are_errors(label: str, value: Any) -> None:
    with pytest.raises(ValueError, match=label):
        build(**{label: value})


@pytest.mark.parametrize("priority", [2**31, -(2**31), True, 1.5, "0"])
def test_build_job_bad_priority(priority: Any) -> None:
    with pytest.raises(ValueError, match="priority"):
        build(priority=priority)


@pytest.mark.parametrize("max_attempts", [0, -1, 2**31, 2.0])
def test_build_job_bad_max_attempts(max_attempts: Any) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        build(max_attempts=max_attempts)


@pytest.mark.parametrize("delay", [-1, math.nan, math.inf, timedelta(seconds=-1)])
def test_build_job_bad_delay(delay: Any) -> None:
    with pytest.raises(ValueError, match="delay"):
        build(delay=delay)


def test_build_job_bad_queue_task_and_payload() -> None:
    with pytest.raises(InvalidName, match="'bad name'"):
        build(queue="bad name")
    with pytest.raises(InvalidName, match="task name"):
        build_job("no good", {}, FULL, max_payload_bytes=100)
    with pytest.raises(InvalidPayload, match="JSON"):
        build_job("t", {"s": {1}}, FULL, max_payload_bytes=100)
    with pytest.raises(InvalidPayload, match="over the limit"):
        build_job("t", {"s": "x" * 100}, FULL, max_payload_bytes=100)


def test_build_job_returns_validated_row() -> None:
    new = build_job(
        "t",
        {"a": [1, "é"]},
        EnqueueOptions(
            queue="q", priority=-3, max_attempts=9, entity_key="e", idempotency_key="i", delay=2
        ),
        max_payload_bytes=100,
    )
    assert new == NewJob(
        queue="q",
        task="t",
        payload='{"a":[1,"é"]}',
        priority=-3,
        run_at=None,
        delay=2,
        max_attempts=9,
        entity_key="e",
        idempotency_key="i",
    )


# -- build_jobs: the jobs of one call ------------------------------------------------------


def test_build_jobs_shares_the_options_and_keeps_payloads_in_order() -> None:
    options = EnqueueOptions(
        queue="q", priority=-3, max_attempts=9, entity_key="e", idempotency_key="i", delay=2
    )
    new = build_jobs("t", ({"n": n} for n in range(3)), options, max_payload_bytes=100)
    assert new == NewJobs(
        queue="q",
        task="t",
        priority=-3,
        run_at=None,
        delay=2,
        max_attempts=9,
        entity_key="e",
        idempotency_key="i",
        payloads='[{"n":0},{"n":1},{"n":2}]',
        count=3,
        first_payload='{"n":0}',
    )
    params = new.params("skiplock.s")
    assert params["payloads"] == new.payloads and params["payload"] == '{"n":0}'
    assert params["channel"] == "skiplock.s" and params["queue"] == "q"


def test_build_jobs_of_one_and_of_none() -> None:
    one = build_jobs("t", [{"a": "é"}], FULL, max_payload_bytes=100)
    assert (one.payloads, one.first_payload, one.count) == ('[{"a":"é"}]', '{"a":"é"}', 1)
    none = build_jobs("t", [], FULL, max_payload_bytes=100)
    assert (none.payloads, none.first_payload, none.count) == ("[]", "", 0)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"run_at": datetime.now(UTC), "delay": 5}, "either run_at or delay"),
        ({"run_at": datetime.now()}, "timezone-aware"),  # naive on purpose
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"entity_key": 5}, "entity_key"),
        ({"priority": 2**31}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"delay": -1}, "delay"),
        ({"queue": "bad name"}, "'bad name'"),
    ],
)
def test_build_jobs_checks_the_shared_options_like_build_job(
    options: dict[str, Any], error: str
) -> None:
    merged = EnqueueOptions(**{**vars(FULL), **options})
    with pytest.raises((ValueError, InvalidName), match=error):
        build_jobs("t", [{"n": 1}, {"n": 2}], merged, max_payload_bytes=100)
    with pytest.raises((ValueError, InvalidName), match=error):
        build_job("t", {"n": 1}, merged, max_payload_bytes=100)


def test_build_jobs_rejects_the_batch_for_one_bad_payload() -> None:
    with pytest.raises(InvalidPayload, match="over the limit"):
        build_jobs("t", [{"n": 1}, {"s": "x" * 100}], FULL, max_payload_bytes=100)
    with pytest.raises(InvalidName, match="task name"):
        build_jobs("no good", [{}], FULL, max_payload_bytes=100)


def test_shared_key_results_one_job_stands_for_all() -> None:
    assert shared_key_results(7, 3, inserted=True) == [
        Enqueued(7),
        Enqueued(7, deduplicated=True),
        Enqueued(7, deduplicated=True),
    ]
    assert shared_key_results(7, 2, inserted=False) == [Enqueued(7, deduplicated=True)] * 2
    assert shared_key_results(7, 1, inserted=True) == [Enqueued(7)]


def test_new_jobs_repeated_is_the_batch_of_the_same_payloads() -> None:
    one = build_job("t", {"a": [1, "é"]}, FULL, max_payload_bytes=100)
    assert NewJobs.repeated(one, 3) == build_jobs(
        "t", [{"a": [1, "é"]}] * 3, FULL, max_payload_bytes=100
    )
    assert NewJobs.repeated(one, 0) == build_jobs("t", [], FULL, max_payload_bytes=100)
