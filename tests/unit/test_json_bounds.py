"""The payload bounds on JSON text (payload.json_shape_error): nesting depth and integer
digits, exact however strings are made up."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from skiplock import InvalidPayload
from skiplock._db.bounds import MAX_JSON_DEPTH, MAX_JSON_INT_DIGITS
from skiplock._db.payload import encode_payload, encode_payloads, json_shape_error


def nested(depth: int, leaf: Any = 1, *, kind: str = "list") -> Any:
    """``depth`` levels of containers around ``leaf`` (an empty container counts as one)."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_depth_is_counted_in_containers_the_value_itself_included(kind: str) -> None:
    for text in (json.dumps(nested(MAX_JSON_DEPTH, kind=kind)),
                 json.dumps(nested(MAX_JSON_DEPTH - 1, [], kind=kind)),
                 json.dumps([nested(MAX_JSON_DEPTH - 1, kind=kind)] * 3)):  # fmt: skip
        assert json_shape_error(text) is None, text[:80]
    for text in (json.dumps(nested(MAX_JSON_DEPTH + 1, kind=kind)),
                 json.dumps(nested(MAX_JSON_DEPTH, {}, kind=kind)),
                 json.dumps([1, {"a": nested(MAX_JSON_DEPTH - 1, kind=kind)}])):  # fmt: skip
        assert "levels" in (json_shape_error(text) or ""), text[:80]


def test_brackets_and_quotes_inside_strings_change_nothing() -> None:
    shallow = {"a": "[" * 500, "b": "]" * 500 + "{", "c": '\\"[[[[', "d": '"' + "[" * 100}
    assert json_shape_error(json.dumps(shallow)) is None
    assert json_shape_error(json.dumps(shallow, ensure_ascii=False)) is None
    # Strings that would balance a too-deep structure's brackets if they were counted.
    tricky = ["]" * 3, nested(MAX_JSON_DEPTH, "x"), "[" * 3]
    assert json_shape_error(json.dumps(tricky)) is not None
    tricky_escaped = ['\\"]]]', nested(MAX_JSON_DEPTH, 'q"'), '[[["']
    assert json_shape_error(json.dumps(tricky_escaped)) is not None


@pytest.fixture
def unlimited_ints() -> Iterator[None]:
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(saved)


def test_long_integers_are_refused_whatever_python_allows(unlimited_ints: None) -> None:
    at_limit = 10**MAX_JSON_INT_DIGITS - 1
    encode_payload({"n": at_limit, "s": "9" * 10_000}, max_bytes=10**6, task="t")
    for payload in ({"n": at_limit + 1}, {"n": [-(10**5000)]}):
        with pytest.raises(InvalidPayload, match=f"{MAX_JSON_INT_DIGITS} digits"):
            encode_payload(payload, max_bytes=10**6, task="t")
        with pytest.raises(InvalidPayload, match=f"{MAX_JSON_INT_DIGITS} digits"):
            encode_payloads([{"a": 1}] * 300 + [payload], max_bytes=10**6, task="t")


def test_long_integers_are_refused_at_pythons_own_limit() -> None:
    with pytest.raises(InvalidPayload, match=f"{MAX_JSON_INT_DIGITS} digits"):
        encode_payload({"n": 10**MAX_JSON_INT_DIGITS}, max_bytes=10**6, task="t")


def test_a_batch_names_its_first_too_deep_payload() -> None:
    payloads = [{"a": i} for i in range(600)]
    payloads[400] = {"deep": nested(MAX_JSON_DEPTH)}
    with pytest.raises(InvalidPayload, match=f"{MAX_JSON_DEPTH} levels"):
        encode_payloads(payloads, max_bytes=10**6, task="t")
    payloads[400] = {"deep": nested(MAX_JSON_DEPTH - 1)}
    assert len(json.loads(encode_payloads(payloads, max_bytes=10**6, task="t"))) == 600
