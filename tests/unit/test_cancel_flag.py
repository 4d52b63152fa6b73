"""A job's ``ctx.cancelled``: a ``threading.Event`` whose lock and condition are made only when
a thread waits on it or sets it (most jobs never do), and which works as an Event across threads
all the same."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from skiplock._runtime.running import RunningJob
from skiplock.job import Job, JobStatus
from skiplock.task import JobContext

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def job() -> Job:
    return Job(1, "q", "t", {}, JobStatus.RUNNING, 0, NOW, 1, 5, "w", NOW, NOW, None, None, NOW)


def made_locks(flag: threading.Event) -> list[str]:
    return [name for name, value in vars(flag).items() if isinstance(value, threading.Condition)]


def test_a_jobs_cancel_flag_makes_no_lock_until_used() -> None:
    running = RunningJob(job(), "lease")
    flags = [running.cancel_flag, JobContext(job(), "w").cancelled]
    for flag in flags:
        assert isinstance(flag, threading.Event)
        assert not flag.is_set()
        assert made_locks(flag) == []  # reading it is free


def test_a_set_flag_wakes_a_thread_that_waits_on_it() -> None:
    running = RunningJob(job(), "lease")
    flag = running.cancel_flag
    assert not flag.wait(0.01)
    seen: list[bool] = []
    waiting = threading.Thread(target=lambda: seen.append(flag.wait(5)))
    waiting.start()
    running.stop("cancelled")
    waiting.join(5)
    assert seen == [True]
    assert flag.is_set()
    flag.clear()
    assert not flag.is_set()


def test_a_flag_asked_for_after_the_stop_is_set() -> None:
    running = RunningJob(job(), "lease")
    running.stop("shutdown")
    assert running.cancel_flag.is_set()
    assert running.cancel_flag.wait(0)
