"""Name validation and payload encoding (skiplock._db.bounds and skiplock._db.payload): pure,
no database."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiplock import InvalidName, InvalidPayload, SkiplockError
from skiplock._db import payload as payload_module
from skiplock._db.bounds import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    check_delay,
    check_max_attempts,
    check_priority,
    check_queue_name,
    check_schema_name,
    check_task_name,
)
from skiplock._db.payload import encode_payload, encode_payloads, load_json

INJECTION = '"; DROP TABLE x; --'

# -- names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["default", "mail", "q", "0", "Emails", "emails.high-priority:v2", "a_b", "q" * 63],
)
def test_valid_queue_names_are_returned_unchanged(name: str) -> None:
    assert check_queue_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "q" * 64,
        "bad name",
        " lead",
        "trail ",
        "it's",
        'say"hi',
        INJECTION,
        "q;",
        "-leading-dash",
        ".leading-dot",
        "_leading_underscore",
        "tab\there",
        "caf\u00e9",
        "slash/q",
    ],
)
def test_invalid_queue_names_raise_invalid_name_naming_the_value(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        check_queue_name(name)
    message = str(info.value)
    assert repr(name) in message
    assert "queue name" in message
    assert isinstance(info.value, SkiplockError)


@pytest.mark.parametrize(
    "name", ["send", "_private", "app.tasks:send_email", "t-1", "T", "t" * 200]
)
def test_valid_task_names_are_returned_unchanged(name: str) -> None:
    assert check_task_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "t" * 201, "1starts_with_digit", "has space", "it's", 'dq"', INJECTION, "-x", "a/b"],
)
def test_invalid_task_names_raise_invalid_name_naming_the_value(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        check_task_name(name)
    assert repr(name) in str(info.value)
    assert "task name" in str(info.value)


@pytest.mark.parametrize("name", ["skiplock", "_s", "s1", "my_app_jobs", "s" * 40])
def test_valid_schema_names_are_returned_unchanged(name: str) -> None:
    assert check_schema_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "s" * 41, "Skiplock", "1schema", "my-schema", "my schema", 'x"; drop', INJECTION, "a.b"],
)
def test_invalid_schema_names_raise_invalid_name_naming_the_value(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        check_schema_name(name)
    assert repr(name) in str(info.value)
    assert "schema name" in str(info.value)


@pytest.mark.parametrize("check", [check_queue_name, check_task_name, check_schema_name])
@pytest.mark.parametrize("value", [None, 5, b"mail", ["mail"], 1.5])
def test_non_string_names_raise_invalid_name(check: Any, value: Any) -> None:
    with pytest.raises(InvalidName) as info:
        check(value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("check", [check_queue_name, check_task_name, check_schema_name])
@pytest.mark.parametrize("suffix", ["\n", "\r\n", "\n; DROP TABLE x"])
def test_names_with_a_line_break_are_rejected(check: Any, suffix: str) -> None:
    # ``$`` in a regex also matches just before a trailing newline: the whole string must match.
    with pytest.raises(InvalidName):
        check("name" + suffix)


# -- payloads ----------------------------------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize(
    ("payload", "what"),
    [
        ({"when": datetime.now(UTC)}, "datetime"),
        ({"tags": {"a", "b"}}, "set"),
        ({"obj": Opaque()}, "Opaque"),
        ({"nested": [1, {"deep": b"bytes"}]}, "bytes"),
        ({"x": math.nan}, "float"),
        ({"x": math.inf}, "float"),
        ({"x": [1.0, -math.inf]}, "float"),
        ({("tuple", "key"): 1}, "tuple"),
    ],
)
def test_non_json_payload_raises_invalid_payload_naming_task_and_json(
    payload: dict[Any, Any], what: str
) -> None:
    with pytest.raises(InvalidPayload) as info:
        encode_payload(payload, max_bytes=DEFAULT_MAX_PAYLOAD_BYTES, task="reports.build")
    message = str(info.value)
    assert "'reports.build'" in message
    assert "JSON" in message
    assert what.lower() in message.lower()
    # The error is not chained to the json internals: one clear message.
    assert info.value.__cause__ is None


@pytest.mark.parametrize("payload", [[1, 2], "text", None, 3])
def test_payload_that_is_not_a_mapping_is_rejected(payload: Any) -> None:
    with pytest.raises(InvalidPayload, match="mapping"):
        encode_payload(payload, max_bytes=1000, task="t")


def test_payload_is_compact_json_that_round_trips() -> None:
    payload = {"to": "a@example.com", "n": 3, "ok": True, "none": None, "l": [1.5, {"k": "v"}]}
    text = encode_payload(payload, max_bytes=1000, task="t")
    assert json.loads(text) == payload
    assert ", " not in text and ": " not in text


def _sized(n_bytes: int, char: str = "x") -> dict[str, str]:
    """A payload whose compact JSON is exactly ``n_bytes`` bytes: {"a":"..."} is 8 + body."""
    width = len(char.encode("utf-8"))
    body, rest = divmod(n_bytes - 8, width)
    assert rest == 0
    return {"a": char * body}


def test_payload_exactly_at_the_limit_is_accepted() -> None:
    payload = _sized(1000)
    text = encode_payload(payload, max_bytes=1000, task="t")
    assert len(text.encode("utf-8")) == 1000


def test_payload_one_byte_over_the_limit_names_size_and_limit() -> None:
    with pytest.raises(InvalidPayload) as info:
        encode_payload(_sized(1001), max_bytes=1000, task="big.task")
    message = str(info.value)
    assert "1001 bytes" in message
    assert "1000 bytes" in message
    assert "'big.task'" in message
    assert "max_payload_bytes" in message  # the fix is named


@pytest.mark.parametrize("char", ["\u00e9", "\u20ac", "\U0001f600"])
def test_payload_size_counts_utf8_bytes_not_characters(char: str) -> None:
    width = len(char.encode("utf-8"))
    assert width > 1
    payload = _sized(8 + 30 * width, char)
    text = encode_payload(payload, max_bytes=8 + 30 * width, task="t")
    assert char in text  # stored as the character itself, not a \u escape
    # 38 characters but 8 + 30 * width bytes: one byte less is over the limit.
    with pytest.raises(InvalidPayload, match=f"{8 + 30 * width} bytes"):
        encode_payload(payload, max_bytes=8 + 30 * width - 1, task="t")


@pytest.mark.parametrize("payload", [{"a": "x\x00y"}, {"a\x00": 1}, {"a": ["ok", {"b": "\x00"}]}])
def test_nul_character_is_rejected_because_jsonb_cannot_store_it(payload: Any) -> None:
    with pytest.raises(InvalidPayload) as info:
        encode_payload(payload, max_bytes=1000, task="t")
    assert "NUL" in str(info.value)


def test_literal_backslash_u0000_text_is_not_mistaken_for_nul() -> None:
    # The six characters \u0000 (a backslash, not a NUL) are fine for jsonb: the backslash
    # is escaped in the JSON text ("\\u0000"), so PostgreSQL stores it as plain text.
    payload = {"path": "C:\\u0000\\dir", "doc": "escape NUL as \\u0000 in JSON"}
    text = encode_payload(payload, max_bytes=1000, task="t")
    assert json.loads(text) == payload


def test_lone_surrogate_is_an_invalid_payload_not_a_unicode_error() -> None:
    # "\ud800" cannot be encoded as UTF-8 (and jsonb rejects it): a clear InvalidPayload,
    # not a UnicodeEncodeError from deep inside.
    with pytest.raises(InvalidPayload) as info:
        encode_payload({"a": "\ud800"}, max_bytes=1000, task="t")
    assert "'t'" in str(info.value)


# No NUL, no lone surrogates (tested above), no backslash: "\\u0000" text is covered by
# test_literal_backslash_u0000_text_is_not_mistaken_for_nul.
_json_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\\"),
    max_size=40,
)
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _json_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_json_text, inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(_json_text, _json_values, max_size=6))
def test_any_json_payload_round_trips_and_the_limit_is_exact(payload: dict[str, Any]) -> None:
    text = encode_payload(payload, max_bytes=DEFAULT_MAX_PAYLOAD_BYTES, task="t")
    assert json.loads(text) == payload
    size = len(text.encode("utf-8"))
    assert encode_payload(payload, max_bytes=size, task="t") == text
    with pytest.raises(InvalidPayload):
        encode_payload(payload, max_bytes=size - 1, task="t")


# -- the other per-job checks ------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -5, 2**31 - 1, -(2**31) + 1])
def test_priority_in_32_bit_range_is_accepted(value: int) -> None:
    assert check_priority(value) == value


@pytest.mark.parametrize("value", [2**31, -(2**31) - 5, True, 1.5, "1", None])
def test_bad_priority_raises_value_error(value: Any) -> None:
    with pytest.raises(ValueError, match="priority"):
        check_priority(value)


@pytest.mark.parametrize("value", [0, -1, 2**31, 1.0, "3", None])
def test_bad_max_attempts_raises_value_error(value: Any) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        check_max_attempts(value)


@pytest.mark.parametrize("value", [-0.001, math.nan, math.inf, -math.inf])
def test_bad_delay_raises_value_error(value: float) -> None:
    with pytest.raises(ValueError, match="delay"):
        check_delay(value)


@pytest.mark.parametrize("value", [None, 0, 0.0, 2.5, 86400 * 365])
def test_good_delay_is_returned(value: float | None) -> None:
    assert check_delay(value) == value


# -- encode_payloads: one JSON array for a batch ------------------------------------------


def one_by_one(payloads: list[Any], max_bytes: int) -> str:
    return "[" + ",".join(encode_payload(p, max_bytes=max_bytes, task="t") for p in payloads) + "]"


JSONABLE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(st.dictionaries(st.text(), JSONABLE, max_size=4), max_size=6))
def test_encode_payloads_is_the_array_of_each_payload_encoded_alone(payloads: list[Any]) -> None:
    for chunk, max_bytes in ((256, DEFAULT_MAX_PAYLOAD_BYTES), (256, 40), (2, 40)):
        with mock.patch.object(payload_module, "_CHUNK", chunk):
            check_encode_payloads(payloads, max_bytes)


def check_encode_payloads(payloads: list[Any], max_bytes: int) -> None:
    try:
        expected: str | Exception = one_by_one(payloads, max_bytes)
    except InvalidPayload as exc:
        expected = exc
    if isinstance(expected, str):
        text = encode_payloads(payloads, max_bytes=max_bytes, task="t")
        assert text == expected
        assert json.loads(text) == payloads
    else:
        with pytest.raises(InvalidPayload) as info:
            encode_payloads(payloads, max_bytes=max_bytes, task="t")
        assert str(info.value) == str(expected)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"s": "a\x00b"}, "NUL"),
        ({"s": "\ud800"}, "lone surrogate"),
        ({"d": datetime.now(UTC)}, "not JSON-serialisable"),
        ({"f": math.nan}, "not JSON-serialisable"),
        ({"s": "x" * 200}, "over the limit"),
        (["not", "a", "mapping"], "must be a mapping"),
    ],
)
def test_encode_payloads_names_the_bad_payload_among_good_ones(bad: Any, message: str) -> None:
    payloads = [{"n": 1}, bad, {"n": 2}]
    with pytest.raises(InvalidPayload, match=message):
        encode_payloads(payloads, max_bytes=100, task="t")


def test_encode_payloads_in_chunks_names_the_first_bad_payload() -> None:
    payloads: list[Any] = [{"n": n, "s": "é" * (n % 7)} for n in range(1000)]
    assert encode_payloads(payloads, max_bytes=100, task="t") == one_by_one(payloads, 100)
    payloads[700] = {"s": "x" * 200}
    payloads[701] = {"s": "a\x00"}
    with pytest.raises(InvalidPayload, match="over the limit"):
        encode_payloads(payloads, max_bytes=100, task="t")


def test_encode_payloads_limit_is_per_payload_not_per_batch() -> None:
    payloads = [{"s": "x" * 80} for _ in range(10)]  # 88 bytes each, 890 in all
    assert encode_payloads(payloads, max_bytes=100, task="t") == one_by_one(payloads, 100)


def test_encode_payloads_escaped_backslash_u0000_is_not_a_nul() -> None:
    payloads = [{"s": "\\u0000"}, {"n": 1}]
    assert encode_payloads(payloads, max_bytes=100, task="t") == '[{"s":"\\\\u0000"},{"n":1}]'


def test_encode_payloads_accepts_any_mapping_like_encode_payload() -> None:
    class Frozen(dict[str, Any]):
        pass

    payloads = [Frozen(a=1), {"b": 2}]
    assert encode_payloads(payloads, max_bytes=100, task="t") == '[{"a":1},{"b":2}]'
    assert encode_payloads([], max_bytes=100, task="t") == "[]"


# -- load_json: decoding what the server sends ---------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)


@given(json_values)
def test_load_json_reads_what_json_loads_reads(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert load_json(text.encode()) == json.loads(text)
        assert load_json(text) == json.loads(text)


def test_load_json_reads_a_memoryview_and_the_server_s_text() -> None:
    assert load_json(memoryview(b'{"a": [1, 2.5, "\\u00e9", null]}')) == {"a": [1, 2.5, "é", None]}
    assert load_json(b'{"big": 123456789012345678901234567890}') == {
        "big": 123456789012345678901234567890
    }


@pytest.mark.parametrize("text", [' {"a": 1}', '{"a": 1} ', "\n[1]\n"])
def test_load_json_takes_whitespace_around_the_value(text: str) -> None:
    assert load_json(text.encode()) == json.loads(text)


@pytest.mark.parametrize("text", ["", "{", '{"a": 1} x', "[1,]", "NaNx", "{'a': 1}"])
def test_load_json_raises_json_loads_error_on_bad_text(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        load_json(text.encode())


def test_a_result_is_encoded_with_the_payload_checks_and_named_as_a_return_value() -> None:
    from skiplock._db.payload import encode_result

    assert encode_result({"a": [1, "é"]}, max_bytes=100, task="t") == '{"a":[1,"é"]}'
    assert encode_result(3.5, max_bytes=100, task="t") == "3.5"
    with pytest.raises(InvalidPayload, match="the return value of task 't' is not JSON"):
        encode_result(object(), max_bytes=100, task="t")
    with pytest.raises(InvalidPayload, match="return value of task 't' is 12 bytes, over"):
        encode_result("x" * 10, max_bytes=11, task="t")
