"""The shared waits of tests/helpers/polling.py: the value they return, the message they fail
with, and the bool variants."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from helpers.polling import WaitTimedOut, comes_true, comes_true_async, wait_for, wait_for_async


def test_wait_for_returns_the_first_truthy_value() -> None:
    values = iter([0, None, "", 7, 8])
    assert wait_for(lambda: next(values), 5, step=0.001) == 7


def test_a_timed_out_wait_says_what_it_waited_for_and_the_last_value() -> None:
    counter = itertools.count()
    with pytest.raises(WaitTimedOut) as raised:
        wait_for(lambda: [n for n in [next(counter)] if n < 0], 0.05, "a negative", step=0.01)
    message = str(raised.value)
    assert message.startswith("timed out after 0.05s waiting for a negative; last value: []")
    assert isinstance(raised.value, AssertionError) and isinstance(raised.value, TimeoutError)


def test_what_may_be_read_at_the_timeout() -> None:
    seen: list[int] = []

    def grows() -> bool:  # the state moves on while the wait runs
        seen.append(1)
        return False

    with pytest.raises(WaitTimedOut) as raised:
        wait_for(grows, 0.03, lambda: f"none (have {len(seen)})", step=0.01)
    assert f"waiting for none (have {len(seen)})" in str(raised.value)
    assert len(seen) > 1


def test_wait_for_async_awaits_awaitable_checks_and_fails_the_same_way() -> None:
    async def main() -> None:
        ticks = itertools.count()

        async def check() -> int:
            return max(0, next(ticks) - 2)

        assert await wait_for_async(check, 5, step=0.001) == 1
        with pytest.raises(WaitTimedOut, match="waiting for never; last value: False"):
            await wait_for_async(lambda: False, 0.02, "never", step=0.005)

    asyncio.run(main())


def test_comes_true_says_whether_it_happened_in_time() -> None:
    assert comes_true(lambda: True, 0.01)
    assert not comes_true(lambda: False, 0.02, step=0.005)
    assert asyncio.run(comes_true_async(lambda: 1, 0.01))
    assert not asyncio.run(comes_true_async(lambda: 0, 0.02, step=0.005))
