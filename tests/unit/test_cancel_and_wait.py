"""Stopping a worker's tasks even when one of them loses a cancellation."""

from __future__ import annotations

import asyncio

from skiplock.worker import cancel_and_wait


def test_a_task_that_lost_its_first_cancellation_is_cancelled_again() -> None:
    """Python 3.11's asyncio.wait_for can swallow a cancellation that races with completion;
    a service loop hit by that keeps running, as this one does on purpose."""
    cancels_seen = 0

    async def service_loop() -> None:
        nonlocal cancels_seen
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                cancels_seen += 1
                if cancels_seen == 1:
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]
                    continue  # as if the cancellation had been lost
                raise

    async def main() -> None:
        loop_task = asyncio.create_task(service_loop())
        done_task = asyncio.create_task(asyncio.sleep(0))
        await asyncio.sleep(0.02)
        await asyncio.wait_for(cancel_and_wait([loop_task, done_task], again_after=0.1), 5.0)
        assert loop_task.cancelled()

    asyncio.run(main())
    assert cancels_seen == 2


def test_a_failed_task_does_not_stop_the_others_from_being_cancelled() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    async def main() -> None:
        failed = asyncio.create_task(fails())
        sleeper = asyncio.create_task(asyncio.sleep(60))
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_and_wait([failed, sleeper]), 5.0)
        assert sleeper.cancelled() and isinstance(failed.exception(), RuntimeError)

    asyncio.run(main())
