"""The parameters a write gets for the claims it names: array literals of ids and attempts,
and each claim's time as its place among the batch's distinct claim times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from skiplock._db.statement_params import claim_arrays, int_array
from skiplock.job import Claim

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_int_array_is_a_postgres_array_literal() -> None:
    assert int_array([]) == "{}"
    assert int_array([7]) == "{7}"
    assert int_array([1, -2, 9_223_372_036_854_775_807]) == "{1,-2,9223372036854775807}"


def test_int_array_takes_only_integers() -> None:
    assert int_array([True, False]) == "{1,0}"  # bools are ints: never 'True'
    with pytest.raises(ValueError):
        int_array(["1,2"])  # type: ignore[list-item]  # text never reaches the literal


def test_claim_arrays_name_each_claim_time_by_its_place_among_the_distinct_ones() -> None:
    t1 = T0 + timedelta(microseconds=1)
    claims = [
        Claim(5, 1, "w", T0),
        Claim(6, 2, "w", t1),
        Claim(7, 1, "w", T0),
        Claim(8, 1, "w", t1),
    ]
    params = claim_arrays(claims)
    assert params == {
        "ids": "{5,6,7,8}",
        "attempts": "{1,2,1,1}",
        "claim_time_index": "{1,2,1,2}",
        "claim_times": [T0, t1],
        "worker": "w",
    }
    times = params["claim_times"]
    assert [times[i - 1] for i in (1, 2, 1, 2)] == [c.claimed_at for c in claims]


def test_claim_arrays_take_one_worker_only() -> None:
    assert claim_arrays([])["worker"] == ""
    with pytest.raises(ValueError, match="one worker"):
        claim_arrays([Claim(1, 1, "w1", T0), Claim(2, 1, "w2", T0)])
