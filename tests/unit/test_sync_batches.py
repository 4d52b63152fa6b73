"""Sync tasks in batches: outcomes of calls that return together reach the event loop in one
wake-up, not one each; a queued call is never left behind a thread whose call turned out slow;
a call the worker stops waiting for before it starts never runs.  Real threads, no database
(docs/design.md, "Sync tasks in batches")."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from skiplock._runtime.execution import in_thread
from skiplock._runtime.task_threads import TaskThreads

SLOTS = 10
CALLS = 2000


def test_outcomes_come_back_to_the_loop_in_batches() -> None:
    """Ten slots each run quick sync calls one after another: the loop is woken from the
    threads far fewer times than there are calls (one wake-up per call before)."""

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        wakeups = 0
        original = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal wakeups
            wakeups += 1
            return original(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        ran = 0

        def call() -> None:
            nonlocal ran
            ran += 1

        left = CALLS

        async def slot() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await in_thread(threads, call, 1)

        with TaskThreads(SLOTS) as threads:
            await asyncio.gather(*(slot() for _ in range(SLOTS)))
        return ran, wakeups

    ran, wakeups = asyncio.run(main())
    assert ran == CALLS
    assert wakeups <= CALLS // 3, f"{wakeups} wake-ups of the loop for {CALLS} calls"


def test_a_call_queued_behind_a_slow_one_starts_all_the_same() -> None:
    """After many quick calls no thread is woken for a queued call while one runs (it will
    take it); if that one turns out slow, the queued call still starts at once or nearly."""

    async def main() -> float:
        release = threading.Event()
        with TaskThreads(SLOTS) as threads:
            for _ in range(200):  # calls are quick, as far as the threads know
                await in_thread(threads, lambda: None, 1)
            slow = asyncio.ensure_future(in_thread(threads, lambda: release.wait(10), 1))
            await asyncio.sleep(0)  # the slow call is queued first
            began = time.monotonic()
            await asyncio.wait_for(in_thread(threads, lambda: None, 2), 5)
            waited = time.monotonic() - began
            release.set()
            await slow
        return waited

    assert asyncio.run(main()) < 0.5


def test_many_calls_queued_behind_slow_ones_run_in_parallel() -> None:
    """Calls that block (I/O in a sync task) queued together each get a thread: ten calls of
    0.2 s take about 0.2 s with ten threads, not two or ten times that."""

    async def main() -> float:
        with TaskThreads(SLOTS) as threads:
            for _ in range(200):
                await in_thread(threads, lambda: None, 1)
            began = time.monotonic()
            await asyncio.gather(
                *(in_thread(threads, lambda: time.sleep(0.2), 1) for _ in range(10))
            )
            return time.monotonic() - began

    assert asyncio.run(main()) < 0.5


def test_a_call_stopped_before_it_starts_never_runs() -> None:
    """All threads busy: a queued call whose wait is cancelled (its job timed out or was
    stopped) is dropped, and the threads go on with the next one."""

    async def main() -> list[str]:
        ran: list[str] = []
        release = threading.Event()
        with TaskThreads(1) as threads:
            busy = asyncio.ensure_future(in_thread(threads, lambda: release.wait(10), 1))
            await asyncio.sleep(0.05)
            queued = asyncio.ensure_future(in_thread(threads, lambda: ran.append("dropped"), 2))
            await asyncio.sleep(0.05)
            queued.cancel()
            await asyncio.gather(queued, return_exceptions=True)
            after = asyncio.ensure_future(in_thread(threads, lambda: ran.append("after"), 3))
            release.set()
            await busy
            await asyncio.wait_for(after, 5)
            assert threads.kept == 0  # a dropped call keeps no thread
        return ran

    assert asyncio.run(main()) == ["after"]


def test_a_call_raising_system_exit_is_its_outcome() -> None:
    """SystemExit raised by the call comes back as its outcome; the threads serve on."""

    async def main() -> Any:
        def exits() -> None:
            raise SystemExit(3)

        with TaskThreads(2) as threads:
            try:
                await in_thread(threads, exits, 1)
            except SystemExit as exc:
                code = exc.code
            return code, await in_thread(threads, lambda: "next", 2)

    assert asyncio.run(main()) == (3, "next")
