"""TaskThreads.keep: a sync call the worker stopped waiting for keeps its thread, and another
thread takes its place (up to ``concurrency`` of them), so later sync jobs do not queue
behind it.  Real threads, no database."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, wait

import pytest

from skiplock._runtime.task_threads import TaskThreads


def start_blocked(threads: TaskThreads, release: threading.Event) -> Future[None]:
    started = threading.Event()

    def call() -> None:
        started.set()
        release.wait(10)

    future = threads.submit(call)
    assert started.wait(5), "the blocked call never started"
    return future


def test_a_kept_thread_is_replaced_so_the_next_call_runs_at_once() -> None:
    release = threading.Event()
    with TaskThreads(1) as threads:
        try:
            stuck = start_blocked(threads, release)
            threads.keep(stuck, job_id=1)
            assert threads.kept == 1
            quick = threads.submit(lambda: "ran")
            assert quick.result(timeout=2) == "ran"  # not behind the stuck call
            assert not stuck.done()
        finally:
            release.set()
        stuck.result(timeout=5)
        assert threads.kept == 0  # it returned: its thread serves jobs again


def test_replacements_stop_at_concurrency_more_threads() -> None:
    release = threading.Event()
    with TaskThreads(2) as threads:
        try:
            stuck = [start_blocked(threads, release) for _ in range(2)]
            for future in stuck:
                threads.keep(future, job_id=1)
            stuck += [start_blocked(threads, release) for _ in range(2)]  # in the 2 new threads
            for future in stuck[2:]:
                threads.keep(future, job_id=2)
            assert threads.kept == 4
            waiting = threads.submit(lambda: "ran")
            time.sleep(0.3)
            assert not waiting.done()  # 4 threads, all kept: no fifth
        finally:
            release.set()
        wait(stuck, timeout=5)
        assert waiting.result(timeout=5) == "ran"
        assert threads.kept == 0


def test_a_call_that_returned_before_it_is_kept_is_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with TaskThreads(1) as threads:
        done = threads.submit(lambda: None)
        done.result(timeout=5)
        threads.keep(done, job_id=1)
        assert threads.kept == 0
    assert not [r for r in caplog.records if "keeps its thread" in r.getMessage()]
