"""Payloads, metas and results as JSON text within the bounds (skiplock._db.bounds), and the
decoding of the JSON the server sends back.  Pure, no I/O."""

from __future__ import annotations

import functools
import json
import json.scanner
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skiplock._db.bounds import MAX_JSON_DEPTH, MAX_JSON_INT_DIGITS, MAX_META_BYTES
from skiplock.errors import InvalidPayload

# A JSON string in the encoder's output (every quote inside one is escaped), and what is left
# of the text's structure once strings are gone.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
# Outside strings, JSON text is ASCII: keep its brackets, all as [ and ].
_BRACKETS_ONLY = {i: None for i in range(128) if chr(i) not in "[]{}"} | {
    ord("{"): "[",
    ord("}"): "]",
}
_LONG_INT = re.compile(rf"\d{{{MAX_JSON_INT_DIGITS + 1}}}")

# What json.dumps(..., allow_nan=False, separators=(",", ":"), ensure_ascii=False) would build
# on every call; made once.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)
# What a serializer gives for a value JSON cannot hold (skiplock.serializer.Serializer.encode).
Default = Callable[[Any], Any]


@functools.lru_cache(maxsize=64)
def _encoder(default: Default | None) -> json.JSONEncoder:
    """The encoder that calls ``default`` for what JSON cannot hold (made once per serializer)."""
    if default is None:
        return _ENCODER
    return json.JSONEncoder(
        allow_nan=False, separators=(",", ":"), ensure_ascii=False, default=default
    )


# Payloads encoded per call of the encoder by encode_payloads.
_CHUNK = 256
# The C scanner json.loads ends up in, without the encoding detection and whitespace checks
# around it (see load_json).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # typeshed wants a scanner; any decoder works
)


def encode_payload(
    payload: Mapping[str, Any], *, max_bytes: int, task: str, default: Default | None = None
) -> str:
    """The payload as JSON text, or :class:`InvalidPayload` naming what is wrong (and the
    argument, for a value that ``default``, the task's serializer, cannot encode)."""
    if not isinstance(payload, Mapping):
        raise InvalidPayload(f"payload of task {task!r} must be a mapping of keyword arguments")
    return _encode_checked(
        payload,
        f"payload of task {task!r}",
        max_bytes,
        "store large data elsewhere and pass a reference (or raise App(max_payload_bytes=...))",
        default,
        arguments=True,
    )


def encode_meta(meta: Mapping[str, Any] | None, *, task: str) -> str | None:
    """A job's meta as JSON text (None when there is none), or :class:`InvalidPayload`."""
    if meta is None or (isinstance(meta, Mapping) and not meta):
        return None
    if not isinstance(meta, Mapping) or not all(isinstance(k, str) for k in meta):
        raise InvalidPayload(f"meta of a job of task {task!r} must be a mapping with str keys")
    return _encode_checked(
        dict(meta),
        f"meta of a job of task {task!r}",
        MAX_META_BYTES,
        "meta is for small values (trace context, request ids, tags): put data in the payload",
    )


def encode_result(value: Any, *, max_bytes: int, task: str, default: Default | None = None) -> str:
    """What a task returned, as JSON text, or :class:`InvalidPayload` naming what is wrong."""
    return _encode_checked(
        value,
        f"the return value of task {task!r}",
        max_bytes,
        "store large results elsewhere and return a reference "
        "(or raise App(max_payload_bytes=...))",
        default,
    )


def _encode_checked(
    value: Any,
    what: str,
    max_bytes: int,
    too_large_hint: str,
    default: Default | None = None,
    *,
    arguments: bool = False,
) -> str:
    encoder = _encoder(default)
    try:
        text = encoder.encode(value)
    except RecursionError:
        raise InvalidPayload(f"{what} {_TOO_DEEP}") from None
    except (TypeError, ValueError) as exc:
        if _INT_DIGITS_ERROR in str(exc):
            raise InvalidPayload(f"{what} {_TOO_LONG_INT}") from None
        how = (
            "use only str, int, float, bool, None, lists and dicts (convert dates, UUIDs and "
            "objects first)"
            if default is None
            else "convert it to a type the task's serializer encodes (see docs/tasks.md)"
        )
        if arguments:
            _name_the_argument(value, what, encoder, how)
        raise InvalidPayload(f"{what} is not JSON-serialisable ({exc}); {how}") from None
    if "\\u0000" in text and _contains_nul(value):
        raise InvalidPayload(f"{what} contains a NUL character, which jsonb rejects")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidPayload(
            f"{what} contains text that is not valid Unicode (a lone surrogate)"
        ) from None
    if size > max_bytes:
        raise InvalidPayload(
            f"{what} is {size} bytes, over the limit of {max_bytes} bytes: {too_large_hint}"
        )
    shape = json_shape_error(text)
    if shape is not None:
        raise InvalidPayload(f"{what} {shape}")
    return text


def _name_the_argument(
    payload: Mapping[str, Any], what: str, encoder: json.JSONEncoder, how: str
) -> None:
    """Raise :class:`InvalidPayload` naming the first argument of ``payload`` (a payload that
    did not encode) that does not encode on its own, saying why."""
    for name, value in payload.items():
        try:
            encoder.encode(value)
        except (TypeError, ValueError) as exc:
            if _INT_DIGITS_ERROR in str(exc):
                continue
            raise InvalidPayload(
                f"argument {name!r} of the {what} is not JSON-serialisable ({exc}); {how}"
            ) from None
        except RecursionError:
            continue


_TOO_DEEP = (
    f"is nested deeper than the limit of {MAX_JSON_DEPTH} levels of objects and arrays "
    "(the value itself counting as one)"
)
_TOO_LONG_INT = (
    f"holds an integer of more than {MAX_JSON_INT_DIGITS} digits, over the limit of "
    f"{MAX_JSON_INT_DIGITS} digits (pass such a number as a string)"
)
_INT_DIGITS_ERROR = "integer string conversion"  # in Python's error past its digits limit


def json_shape_error(text: str, levels: int = MAX_JSON_DEPTH) -> str | None:
    """What puts JSON text out of bounds (the text of a value of at most ``levels`` levels):
    deeper nesting, or an integer of more than MAX_JSON_INT_DIGITS digits; None if nothing."""
    if text.count("{") + text.count("[") > levels and _depth_over(text, levels):
        return _TOO_DEEP
    # Python writes no integer that long unless its limit was raised (sys.set_int_max_str_digits).
    if (
        len(text) > MAX_JSON_INT_DIGITS
        and not 0 < sys.get_int_max_str_digits() <= MAX_JSON_INT_DIGITS
        and _LONG_INT.search(_outside_strings(text))
    ):
        return _TOO_LONG_INT
    return None


def _depth_over(text: str, levels: int) -> bool:
    """Whether the JSON text nests objects and arrays deeper than ``levels``."""
    brackets = _outside_strings(text).translate(_BRACKETS_ONLY)
    # Each pass removes the innermost pairs (valid JSON: they match): passes are the depth.
    for _ in range(levels):
        brackets = brackets.replace("[]", "")
        if not brackets:
            return False
    return True


def _outside_strings(text: str) -> str:
    """The JSON text without the contents of its strings."""
    if '\\"' in text:  # an escaped quote: find the strings the slow way
        return _JSON_STRING.sub('""', text)
    return '""'.join(text.split('"')[::2])


def encode_payloads(
    payloads: Sequence[Mapping[str, Any]],
    *,
    max_bytes: int,
    task: str,
    default: Default | None = None,
) -> str:
    """The payloads as one JSON array, element i being what :func:`encode_payload` gives for
    payload i; :class:`InvalidPayload` names the first one that is wrong.

    Plain dicts are encoded a chunk per call: the checks on the chunk's text hold for each of
    its elements (no NUL escape, valid Unicode, the total within the limit bounds each
    payload).  When they do not, each half is encoded the same way, down to single payloads,
    which get the precise check and message (left first, so the first bad payload is named).
    """
    if len(payloads) > _CHUNK:
        # In chunks: one that fails its checks is encoded again, not the whole batch.
        parts = [
            encode_payloads(
                payloads[i : i + _CHUNK], max_bytes=max_bytes, task=task, default=default
            )[1:-1]
            for i in range(0, len(payloads), _CHUNK)
        ]
        return "[" + ",".join(parts) + "]"
    if len(payloads) > 1 and all(type(payload) is dict for payload in payloads):
        text = _encode_if_clean(payloads, max_bytes, default)
        if text is not None:
            return text
        middle = len(payloads) // 2
        left = encode_payloads(payloads[:middle], max_bytes=max_bytes, task=task, default=default)
        right = encode_payloads(payloads[middle:], max_bytes=max_bytes, task=task, default=default)
        return f"[{left[1:-1]},{right[1:-1]}]"
    texts = [
        encode_payload(payload, max_bytes=max_bytes, task=task, default=default)
        for payload in payloads
    ]
    return "[" + ",".join(texts) + "]"


def _encode_if_clean(value: Any, max_bytes: int, default: Default | None = None) -> str | None:
    """``value`` as JSON if it encodes, has no NUL escape, is valid Unicode and fits."""
    try:
        text = _encoder(default).encode(value)
    except (TypeError, ValueError, RecursionError):
        return None
    if "\\u0000" in text:
        return None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    if size > max_bytes or json_shape_error(text, MAX_JSON_DEPTH + 1) is not None:
        return None  # (the list around the values is one more level)
    return text


def _contains_nul(value: Any) -> bool:
    """Whether a NUL character hides in any key or string of a JSON-able value."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_contains_nul(v) for v in value)
    return False


def load_json(data: str | bytes) -> Any:
    """``json.loads`` for the JSON text PostgreSQL sends (jsonb's canonical form), faster: a
    worker decodes one payload per job (docs/design.md, "Payloads as JSON text, decoded by the
    worker").  Text that does not parse to its end in one
    go (leading whitespace, say) goes through ``json.loads``, errors and all."""
    text = data if isinstance(data, str) else str(data, "utf-8")
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)
