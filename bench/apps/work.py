"""The real-work workload's job: what a handler does besides recording its job's number.

The setting under test gives it to every worker process as ``BENCH_WORK=<kind>:<seconds>``
(unset: the no-op of the other workloads), so every system's handler runs the same work:

- ``async-io``: ``await asyncio.sleep(seconds)`` (an awaited call to a slow service);
- ``sync-io``: ``time.sleep(seconds)`` in a plain ``def`` handler, which each system runs in
  one of its threads (a blocking client: requests, a sync database driver);
- ``cpu``: ``seconds`` of this thread's CPU spent in a pure-Python loop, in an ``async def``
  handler (it holds the GIL and the event loop while it runs, as such code does).

Every system's app registers :func:`run_sync` or :func:`run_async` as its task (:data:`SYNC`
says which, for the systems that run both), so the handlers of all of them record the job and
do the work the same way.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

from .record import record

KINDS = ("async-io", "sync-io", "cpu")


def parse(value: str) -> tuple[str, float]:
    """``"async-io:0.005"`` -> ``("async-io", 0.005)``; ``""`` -> ``("", 0.0)`` (no-op)."""
    if not value:
        return "", 0.0
    kind, _, seconds = value.partition(":")
    if kind not in KINDS:
        raise ValueError(f"BENCH_WORK kind {kind!r} is not one of {KINDS}")
    return kind, float(seconds)


KIND, SECONDS = parse(os.environ.get("BENCH_WORK", ""))

# A plain ``def`` handler: the sync-io work, or the no-op with ``BENCH_HANDLER=sync`` (skiplock's
# sync settings); else an ``async def`` one, for the systems that run coroutines.
SYNC = KIND == "sync-io" or (not KIND and os.environ.get("BENCH_HANDLER", "async") == "sync")


def run_sync(n: int) -> None:
    """A plain ``def`` handler: record job ``n``, then its work (async-io in an event loop of
    its own, for the systems that run no coroutines: Celery, Dramatiq)."""
    record(n)
    if KIND == "sync-io":
        time.sleep(SECONDS)
    elif KIND == "cpu":
        burn(SECONDS)
    elif KIND == "async-io":
        asyncio.run(asyncio.sleep(SECONDS))


async def run_async(n: int) -> None:
    """An ``async def`` handler: record job ``n``, then its work (sync-io is registered as
    :func:`run_sync` instead: see :data:`SYNC`)."""
    record(n)
    if KIND == "async-io":
        await asyncio.sleep(SECONDS)
    elif KIND == "cpu":
        burn(SECONDS)


def burn(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time in Python bytecode (a thread's CPU clock,
    not the wall clock: on a loaded machine each job still does the same work)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        for _ in range(100):
            pass


def floor(kind: str, seconds: float, concurrency: int, jobs: int) -> float:
    """Jobs/s of the same work with no queue at all: ``concurrency`` coroutines (async-io) or
    threads (sync-io) doing ``jobs`` jobs between them in this process. What the event loop's
    timers or the threads' wake-ups allow on this machine now, below the ideal."""
    if kind == "async-io":

        async def run() -> None:
            left = [jobs]

            async def slot() -> None:
                while left[0] > 0:
                    left[0] -= 1
                    await asyncio.sleep(seconds)

            await asyncio.gather(*(slot() for _ in range(concurrency)))

        t0 = time.perf_counter()
        asyncio.run(run())
        return jobs / (time.perf_counter() - t0)
    if kind == "sync-io":
        left = [jobs]
        lock = threading.Lock()

        def slot() -> None:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                time.sleep(seconds)

        threads = [threading.Thread(target=slot) for _ in range(concurrency)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return jobs / (time.perf_counter() - t0)
    raise ValueError(f"no floor for {kind!r}")


if __name__ == "__main__":  # python -m bench.apps.work async-io:0.005 100 20000
    import sys

    k, s = parse(sys.argv[1])
    print(floor(k, s, int(sys.argv[2]), int(sys.argv[3])))
