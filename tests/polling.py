"""Waiting in tests for something another task, thread or process makes true."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def wait_for(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float, step: float = 0.02
) -> bool:
    """True as soon as ``predicate()`` (plain or awaitable) is true; False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if not isinstance(value, bool):
            value = await value
        if value:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step)
