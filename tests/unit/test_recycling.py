"""When a worker has done its share (--max-jobs, --max-memory): pure arithmetic and a fake
memory gauge."""

from __future__ import annotations

import asyncio
import os

import pytest

from skiplock._runtime.recycling import Recycling, resident_bytes


def test_max_jobs_caps_each_claim_then_makes_the_worker_due() -> None:
    recycling = Recycling(max_jobs=10)
    assert recycling.enabled
    assert recycling.claimable() == 10
    recycling.count_claimed(7)
    assert recycling.claimable() == 3
    assert recycling.reason is None
    recycling.count_claimed(3)
    assert recycling.claimable() == 0
    assert recycling.reason == "claimed its 10 jobs (--max-jobs)"


def test_without_limits_nothing_is_capped() -> None:
    recycling = Recycling()
    assert not recycling.enabled
    recycling.count_claimed(10**9)
    assert recycling.claimable() is None
    assert not recycling.check_memory()
    assert recycling.reason is None


def test_memory_over_the_limit_makes_the_worker_due_once() -> None:
    used = [100 * 2**20]
    recycling = Recycling(max_memory=200 * 2**20, memory=lambda: used[0])
    assert recycling.enabled and recycling.claimable() is None
    assert not recycling.check_memory()
    used[0] = 201 * 2**20
    assert recycling.check_memory()
    assert recycling.reason == "uses 201 MiB, over its 200 MiB (--max-memory)"
    assert recycling.claimable() == 0
    used[0] = 10
    assert recycling.check_memory()  # it does not become undue


def test_the_memory_watch_calls_back_once_due() -> None:
    readings = iter([1, 2, 3, 500])
    calls: list[str] = []
    recycling = Recycling(max_memory=100, memory=lambda: next(readings))

    async def watch() -> None:
        await asyncio.wait_for(recycling.watch_memory(lambda: calls.append("due")), 10)

    import skiplock._runtime.recycling as module

    interval, module.MEMORY_CHECK_INTERVAL = module.MEMORY_CHECK_INTERVAL, 0.001
    try:
        asyncio.run(watch())
    finally:
        module.MEMORY_CHECK_INTERVAL = interval
    assert calls == ["due"] and recycling.reason is not None


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_jobs"):
        Recycling(max_jobs=0)
    with pytest.raises(ValueError, match="max_memory"):
        Recycling(max_memory=0)


def test_resident_memory_grows_with_what_the_process_holds() -> None:
    before = resident_bytes()
    assert before > 10 * 2**20  # a Python process with pytest loaded
    held = bytearray(64 * 2**20)
    for i in range(0, len(held), os.sysconf("SC_PAGE_SIZE")):
        held[i] = 1  # touched: resident
    assert resident_bytes() - before > 48 * 2**20
    del held
