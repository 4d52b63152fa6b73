"""What the hostile fuzz suite generates: values a careless or hostile producer could hand to
``enqueue``, and raw rows the enqueuer role could insert with SQL.

Each generator mixes ordinary values with the edges found by hand (issue 41): deep nesting,
integers Python's ``int()`` refuses, NUL and lone surrogates, timestamps outside what Python's
``datetime`` holds, keys past the btree limit, booleans passed as numbers.  The suite's size
comes from ``SKIPLOCK_FUZZ_EXAMPLES`` (CI's quick mode keeps it small; ``run.py --full`` raises
it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from typing import Any

from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("SKIPLOCK_FUZZ_EXAMPLES", "40"))
TALLY: Counter[str] = Counter()  # what was tried and what came of it, by kind

TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), min_size=0, max_size=40)
SHORT = st.text(min_size=1, max_size=20)


def _deep(depth: int, leaf: Any = 1) -> Any:
    value: Any = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(SHORT, inner, max_size=4)),
    max_leaves=20,
)
ODD_VALUE = st.one_of(
    st.builds(_deep, st.sampled_from([10, 63, 64, 65, 100, 500, 985, 3000])),
    st.just(10**4400),
    st.just(-(10**5000)),
    st.just("nul\x00inside"),
    st.just("lone \ud800 surrogate"),
    st.just(b"bytes"),
    st.just({1, 2}),
    st.just(dt.datetime(2030, 1, 1)),
    st.just("x" * 5000),
    st.just({1: "int key"}),
)
PAYLOAD = st.one_of(
    st.dictionaries(SHORT, st.one_of(JSON_VALUE, ODD_VALUE), max_size=4),
    st.just([1, 2]),
    st.just(None),
    st.just("text"),
)

KEY = st.one_of(
    st.none(),
    SHORT,
    TEXT,
    st.sampled_from(["", " ", "a\x00b", "\ud800", "k" * 511, "k" * 512, "k" * 513, "k" * 3000]),
    st.integers(),
)
NUMBER = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, -(2**31), 2**63 - 1, 2**63]),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1", None]),
)
DELAY = st.one_of(
    st.none(),
    st.floats(min_value=0, max_value=3600),
    st.sampled_from([-1.0, 0.0, 1e9, 1e12, 1e300, float("inf"), float("nan"), True, "5"]),
)
RUN_AT = st.one_of(
    st.none(),
    st.sampled_from(
        [
            dt.datetime(2030, 1, 1),  # naive
            dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.UTC),
            dt.datetime(1, 1, 1, tzinfo=dt.UTC),
            dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
            "2030-01-01",
            0,
            dt.date(2030, 1, 1),
        ]
    ),
)


@st.composite
def client_case(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(options for ``with_options``, payload for ``enqueue``): each option is present or not."""
    options: dict[str, Any] = {}
    for name, strategy in (
        ("priority", NUMBER),
        ("delay", DELAY),
        ("run_at", RUN_AT),
        ("max_attempts", NUMBER),
        ("entity_key", KEY),
        ("idempotency_key", KEY),
        ("depends_on", st.lists(NUMBER, max_size=2)),
        ("expires", DELAY),
    ):
        if draw(st.integers(0, 3)) == 0:
            options[name] = draw(strategy)
    if "run_at" in options and "delay" in options:
        del options["delay"]
    return options, draw(PAYLOAD)


def _finite(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError):
        return False
    return True


def _deep_text(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


PAYLOAD_TEXT = st.one_of(
    st.builds(
        lambda value: json.dumps(value, allow_nan=False),
        st.dictionaries(SHORT, st.one_of(JSON_LEAF.filter(_finite), JSON_VALUE.filter(_finite))),
    ),
    st.builds(lambda d: '{"a": ' + _deep_text(d) + "}", st.sampled_from([64, 65, 500, 985, 5000])),
    st.sampled_from(
        [
            '{"n": ' + "9" * 4400 + "}",
            '{"n": 1e400}',
            '{"n": -1e5000}',
            '{"n": 1e-400}',
            '{"s": "nul \\u0000"}',
            "[1, 2]",
            "null",
            '"text"',
            "{}",
            '{"x": "' + "y" * 2_000_000 + '"}',
        ]
    ),
)
TIMESTAMP_TEXT = st.sampled_from(
    [
        None,
        "now()",
        "-infinity",
        "infinity",
        "0001-01-01 00:00+00",
        "4713-01-01 BC",
        "9999-12-31 23:59+00",
        "10000-01-01 00:00+00",
        "33715-01-01 00:00+00",
        "294276-12-31 23:59+00",
        "now() - interval '1 hour'",
    ]
)
STATUS = st.sampled_from(
    ["pending", "scheduled", "waiting", "running", "done", "failed", "cancelled"]
)


@st.composite
def raw_row(draw: st.DrawFn, tasks: list[str]) -> dict[str, Any]:
    """Column values for one INSERT into the jobs table, as the enqueuer role might write it."""
    row: dict[str, Any] = {
        "queue": "fuzz",
        "task": draw(st.one_of(st.sampled_from(tasks), SHORT, st.just("os.system"))),
        "payload": draw(PAYLOAD_TEXT),
    }
    optional = {
        "status": STATUS,
        "priority": st.integers(min_value=-(2**31), max_value=2**31 - 1),
        "run_at": TIMESTAMP_TEXT,
        "max_attempts": st.integers(min_value=-3, max_value=2**31 - 1),
        "entity_key": st.one_of(SHORT, st.sampled_from(["k" * 512, "k" * 513, "k" * 3000])),
        "idempotency_key": st.one_of(SHORT, st.sampled_from(["i" * 513, "i" * 3000])),
        "expires_at": TIMESTAMP_TEXT,
        "meta": st.sampled_from(['{"trace": "x"}', _deep_text(200), "[1]", "null"]),
    }
    for name, strategy in optional.items():
        if draw(st.integers(0, 2)) == 0:
            row[name] = draw(strategy)
    return row
