"""Running an in-process Worker in tests: until something is true, then stopping it; and
recording the claims its leased slots send."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from helpers.polling import wait_for_async
from skiplock import Worker
from skiplock._runtime.leased_slots import LeasedSlots


def run_until(
    worker: Worker,
    done: Callable[[], object],
    timeout: float = 10.0,
    *,
    then: threading.Event | None = None,
    stop_timeout: float | None = None,
) -> None:
    """Run ``worker`` until ``done()`` (failing after ``timeout`` seconds); then set ``then``
    (what its tasks wait for, if any) and stop it, waiting ``stop_timeout`` seconds at most for
    it to end (None: as long as it takes)."""

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(done, timeout, lambda: worker.stats)
        finally:
            if then is not None:
                then.set()
            worker.stop()
            await asyncio.wait_for(task, stop_timeout)

    asyncio.run(main())


def record_claims(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every claim the leased slots send from now on, as (jobs claimed and not yet recorded at
    the send: running, queued ahead, reserved or unwritten; the claim's limit)."""
    seen: list[tuple[int, int]] = []
    claim = LeasedSlots.claim

    async def recording(slots: LeasedSlots, queues: list[str], limit: int) -> int:
        state = slots.state
        in_flight = len(state.busy) + slots.ahead + len(state.reserved) + slots.completer.pending
        seen.append((in_flight, limit))
        return await claim(slots, queues, limit)

    monkeypatch.setattr(LeasedSlots, "claim", recording)
    return seen
