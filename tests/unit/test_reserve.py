"""The order in which a leasing worker starts the jobs it has claimed (its reserve)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from skiplock._runtime.reserve import Reserve
from skiplock._runtime.running import RunningJob
from skiplock.job import Job, JobStatus

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def running(job_id: int, queue: str = "q", priority: int = 0) -> RunningJob:
    job = Job(job_id, queue, "t", {}, JobStatus.RUNNING, priority, NOW, 1, 5, "w", NOW, NOW,
              None, None, NOW)  # fmt: skip
    return RunningJob(job, "lease")


def drain(reserve: Reserve) -> list[int]:
    order = []
    while reserve:
        order.append(reserve.popleft().job.id)
    assert len(reserve) == 0
    return order


def test_one_queue_starts_by_priority_then_in_claim_order() -> None:
    reserve = Reserve()
    for job_id, priority in [(1, 0), (2, 0), (3, 5), (4, -1), (5, 0), (6, -1)]:
        reserve.append(running(job_id, priority=priority))
    assert len(reserve) == 6
    assert sorted(r.job.id for r in reserve) == [1, 2, 3, 4, 5, 6]
    assert drain(reserve) == [4, 6, 1, 2, 5, 3]


def test_a_queue_with_nothing_reserved_starts_next_then_queues_take_turns() -> None:
    reserve = Reserve()
    for job_id in range(1, 6):
        reserve.append(running(job_id, "busy"))
    reserve.append(running(10, "other"))
    reserve.append(running(11, "other"))
    assert drain(reserve) == [10, 1, 11, 2, 3, 4, 5]


def test_weights_set_the_shares_of_the_turns() -> None:
    reserve = Reserve({"a": 3})
    for job_id in range(100, 108):
        reserve.append(running(job_id, "b"))
    for job_id in range(8):
        reserve.append(running(job_id, "a"))
    firsts = ["a" if job_id < 100 else "b" for job_id in drain(reserve)[:8]]
    assert firsts.count("a") == 6 and firsts.count("b") == 2


def test_an_empty_reserve_pops_nothing() -> None:
    with pytest.raises(IndexError):
        Reserve().popleft()
