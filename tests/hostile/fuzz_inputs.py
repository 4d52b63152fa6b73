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
import re
from collections import Counter
from typing import Any

from hypothesis import strategies as st

INF = float("inf")
EXAMPLES = int(os.environ.get("SKIPLOCK_FUZZ_EXAMPLES", "40"))
TALLY: Counter[str] = Counter()  # what was tried and what came of it, by kind

TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), min_size=0, max_size=40)
SHORT = st.text(min_size=1, max_size=20)


def mostly(plain: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``plain`` three times in four, else ``odd``: enough well-formed inputs get through for the
    worker and the admin surfaces to meet the odd ones that the table still accepts."""
    return st.integers(0, 3).flatmap(lambda i: odd if i == 0 else plain)


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
PLAIN_PAYLOAD = st.dictionaries(SHORT, JSON_VALUE, max_size=4)
PAYLOAD = mostly(
    PLAIN_PAYLOAD,
    st.one_of(
        st.dictionaries(SHORT, st.one_of(JSON_VALUE, ODD_VALUE), min_size=1, max_size=3),
        st.sampled_from([[1, 2], None, "text"]),
    ),
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
        ("priority", mostly(st.integers(-100, 100), NUMBER)),
        ("delay", mostly(st.floats(0, 2), DELAY)),
        ("run_at", RUN_AT),
        ("max_attempts", mostly(st.integers(1, 5), NUMBER)),
        ("entity_key", mostly(SHORT, KEY)),
        ("idempotency_key", mostly(SHORT, KEY)),
        ("depends_on", st.lists(mostly(st.integers(1, 30), NUMBER), max_size=2)),
        ("expires", mostly(st.floats(60, 3600), DELAY)),
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


PAYLOAD_TEXT = mostly(
    st.builds(
        lambda value: json.dumps(value, allow_nan=False),
        st.dictionaries(SHORT, st.one_of(JSON_LEAF.filter(_finite), JSON_VALUE.filter(_finite))),
    ),
    st.one_of(
        st.builds(
            lambda d: '{"a": ' + _deep_text(d) + "}", st.sampled_from([64, 65, 500, 985, 5000])
        ),
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
        "task": draw(mostly(st.sampled_from(tasks), st.one_of(SHORT, st.just("os.system")))),
        "payload": draw(PAYLOAD_TEXT),
    }
    optional = {
        "status": mostly(st.sampled_from(["pending", "scheduled"]), STATUS),
        "priority": st.integers(min_value=-(2**31), max_value=2**31 - 1),
        "run_at": mostly(st.just("now() - interval '1 second'"), TIMESTAMP_TEXT),
        "max_attempts": mostly(st.integers(1, 5), st.integers(-3, 2**31 - 1)),
        "entity_key": mostly(SHORT, st.sampled_from(["k" * 512, "k" * 513, "k" * 3000])),
        "idempotency_key": mostly(SHORT, st.sampled_from(["i" * 513, "i" * 3000])),
        "expires_at": mostly(st.just("now() + interval '1 hour'"), TIMESTAMP_TEXT),
        "meta": mostly(
            st.just('{"trace": "x"}'), st.sampled_from([_deep_text(200), "[1]", "null"])
        ),
    }
    for name, strategy in optional.items():
        if draw(st.integers(0, 2)) == 0:
            row[name] = draw(strategy)
    return row


def payload_kind(value: Any, depth: int = 0) -> str:
    """What is odd about a generated payload, for the tally: the first oddity found."""
    if depth == 0 and not isinstance(value, dict):
        return "not a mapping"
    if depth > 64:
        return "nested over 64 levels"
    if isinstance(value, bool) or value is None:
        return "plain"
    if isinstance(value, int):
        return "integer over 4,300 digits" if abs(value) >= 10**4300 else "plain"
    if isinstance(value, float):
        return "NaN or infinity" if value != value or value in (INF, -INF) else "plain"
    if isinstance(value, str):
        if "\x00" in value:
            return "NUL in text"
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            return "lone surrogate"
        return "plain"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return "non-text key"
        items: list[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, list):
        items = value
    else:
        return f"not JSON ({type(value).__name__})"
    for item in items:
        kind = payload_kind(item, depth + 1)
        if kind != "plain":
            return kind
    return "plain"


def row_kind(row: dict[str, Any]) -> list[str]:
    """The columns a generated row sets beyond queue, task and payload, and the payload's form."""
    text = row["payload"]
    if not text.startswith("{"):
        form = "payload not an object"
    elif text.count("[") > 64:
        form = "payload nested over 64 levels"
    elif any(len(run) > 4300 for run in re.findall(r"[0-9]+", text[:5000])):
        form = "payload with a huge number"
    elif len(text) > 1_000_000:
        form = "payload over 1 MB"
    else:
        form = "payload plain"
    extra = [f"{name}={row[name]}" for name in ("status",) if name in row]
    extra += [f"sets {name}" for name in row if name not in ("queue", "task", "payload", "status")]
    return [form, *extra]
