"""Waiting in tests for something another task, thread or process makes true.

The one sync :func:`wait_for` and the one async :func:`wait_for_async`: each polls ``check``
until it returns a truthy value, returns that value, and on timeout raises :class:`WaitTimedOut`
with what was awaited and the last value seen.  :func:`comes_true` and :func:`comes_true_async`
say the same as a bool, for the tests that check something does *not* happen in time.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# What is awaited: text, or any object (its state is shown at the timeout), or a callable
# whose result is shown (for values that must be read at the timeout, e.g. ``lambda: len(ran)``).
What = object


class WaitTimedOut(AssertionError, TimeoutError):
    """A wait timed out: an assertion failure for pytest, a TimeoutError for scripts."""


def _message(timeout: float, what: What, last: object) -> str:
    described = what() if callable(what) else what
    about = f" waiting for {described}" if described not in ("", None) else ""
    return f"timed out after {timeout:g}s{about}; last value: {last!r}"


def wait_for(check: Callable[[], T], timeout: float, what: What = "", step: float = 0.05) -> T:
    """``check()``'s first truthy value, polled every ``step`` seconds for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimedOut(_message(timeout, what, value))
        time.sleep(step)


async def wait_for_async(
    check: Callable[[], T | Awaitable[T]], timeout: float, what: What = "", step: float = 0.02
) -> T:
    """:func:`wait_for` in an event loop: ``check`` may be plain or return an awaitable, and the
    loop runs between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise WaitTimedOut(_message(timeout, what, value))
        await asyncio.sleep(step)


def comes_true(check: Callable[[], object], timeout: float, step: float = 0.05) -> bool:
    """Whether ``check()`` turns truthy within ``timeout`` seconds (:func:`wait_for` as a bool)."""
    try:
        wait_for(check, timeout, step=step)
    except WaitTimedOut:
        return False
    return True


async def comes_true_async(check: Callable[[], object], timeout: float, step: float = 0.02) -> bool:
    """Whether ``check()`` turns truthy within ``timeout`` seconds (:func:`wait_for_async` as a
    bool)."""
    try:
        await wait_for_async(check, timeout, step=step)
    except WaitTimedOut:
        return False
    return True
