"""The array literal the store passes for lists of job ids and attempts."""

from __future__ import annotations

import pytest

from skiplock.statement_params import int_array


def test_int_array_is_a_postgres_array_literal() -> None:
    assert int_array([]) == "{}"
    assert int_array([7]) == "{7}"
    assert int_array([1, -2, 9_223_372_036_854_775_807]) == "{1,-2,9223372036854775807}"


def test_int_array_takes_only_integers() -> None:
    assert int_array([True, False]) == "{1,0}"  # bools are ints: never 'True'
    with pytest.raises(ValueError):
        int_array(["1,2"])  # type: ignore[list-item]  # text never reaches the literal
