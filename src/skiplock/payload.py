"""Checks on what callers hand to enqueue (names, payloads, options), payload encoding, and
the decoding of the JSON the server sends back.  Pure, no I/O."""

from __future__ import annotations

import json
import json.scanner
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import InvalidName, InvalidPayload

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_META_BYTES = 8 * 1024  # a job's meta, as JSON

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")
_TASK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")

# What json.dumps(..., allow_nan=False, separators=(",", ":"), ensure_ascii=False) would build
# on every call; made once.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)
# Payloads encoded per call of the encoder by encode_payloads.
_CHUNK = 256
# The C scanner json.loads ends up in, without the encoding detection and whitespace checks
# around it (see load_json).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # typeshed wants a scanner; any decoder works
)


def check_queue_name(name: str) -> str:
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid queue name {name!r}: use 1-63 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_task_name(name: str) -> str:
    if not isinstance(name, str) or not _TASK_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid task name {name!r}: use letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or '_' (at most 200 characters)"
        )
    return name


def check_schema_name(name: str) -> str:
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid schema name {name!r}: use 1-40 lower-case letters, digits or '_', "
            "not starting with a digit"
        )
    return name


def encode_payload(payload: Mapping[str, Any], *, max_bytes: int, task: str) -> str:
    """The payload as JSON text, or :class:`InvalidPayload` naming what is wrong."""
    if not isinstance(payload, Mapping):
        raise InvalidPayload(f"payload of task {task!r} must be a mapping of keyword arguments")
    return _encode_checked(
        payload,
        f"payload of task {task!r}",
        max_bytes,
        "store large data elsewhere and pass a reference (or raise App(max_payload_bytes=...))",
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


def encode_result(value: Any, *, max_bytes: int, task: str) -> str:
    """What a task returned, as JSON text, or :class:`InvalidPayload` naming what is wrong."""
    return _encode_checked(
        value,
        f"the return value of task {task!r}",
        max_bytes,
        "store large results elsewhere and return a reference "
        "(or raise App(max_payload_bytes=...))",
    )


def _encode_checked(value: Any, what: str, max_bytes: int, too_large_hint: str) -> str:
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(
            f"{what} is not JSON-serialisable ({exc}); use only str, int, float, bool, None, "
            "lists and dicts (convert dates, UUIDs and objects first)"
        ) from None
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
    return text


def encode_payloads(payloads: Sequence[Mapping[str, Any]], *, max_bytes: int, task: str) -> str:
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
            encode_payloads(payloads[i : i + _CHUNK], max_bytes=max_bytes, task=task)[1:-1]
            for i in range(0, len(payloads), _CHUNK)
        ]
        return "[" + ",".join(parts) + "]"
    if len(payloads) > 1 and all(type(payload) is dict for payload in payloads):
        text = _encode_if_clean(payloads, max_bytes)
        if text is not None:
            return text
        middle = len(payloads) // 2
        left = encode_payloads(payloads[:middle], max_bytes=max_bytes, task=task)
        right = encode_payloads(payloads[middle:], max_bytes=max_bytes, task=task)
        return f"[{left[1:-1]},{right[1:-1]}]"
    texts = [encode_payload(payload, max_bytes=max_bytes, task=task) for payload in payloads]
    return "[" + ",".join(texts) + "]"


def _encode_if_clean(value: Any, max_bytes: int) -> str | None:
    """``value`` as JSON if it encodes, has no NUL escape, is valid Unicode and fits."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError):
        return None
    if "\\u0000" in text:
        return None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    return text if size <= max_bytes else None


def check_priority(priority: int) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool) or abs(priority) >= 2**31:
        raise ValueError(f"priority must be a 32-bit integer, got {priority!r}")
    return priority


def check_max_attempts(max_attempts: int) -> int:
    if not isinstance(max_attempts, int) or not 1 <= max_attempts < 2**31:
        raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
    return max_attempts


def check_delay(delay: float | None) -> float | None:
    if delay is not None and (not math.isfinite(delay) or delay < 0):
        raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
    return delay


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
    """``json.loads`` for the JSON text PostgreSQL sends (jsonb's canonical form), about 3x
    faster: a worker decodes one payload per job.  Text that does not parse to its end in one
    go (leading whitespace, say) goes through ``json.loads``, errors and all."""
    text = data if isinstance(data, str) else str(data, "utf-8")
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)
