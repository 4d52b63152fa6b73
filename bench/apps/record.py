"""What a worker process saw: which job numbers its handler ran, and when each started.

The handler of every system calls :func:`record` with the job's sequence number ``n`` (taken
from the job's payload).  Two appends to typed arrays and a count written to a shared memory
page, no I/O: well under a microsecond.  When the process exits (normally, e.g. after SIGTERM),
both arrays are written to ``$BENCH_RECORD_DIR/<pid>.bin`` for the benchmark to check (every
job exactly once) and time (first start, per-second throughput, enqueue-to-start latency).
The count (``<pid>.count``, memory-mapped) lets the benchmark follow progress while the
workers run without asking the database (:func:`started_so_far`).
"""

from __future__ import annotations

import atexit
import mmap
import os
import threading
import time
from array import array
from pathlib import Path

_numbers = array("q")
_starts = array("d")
_count: mmap.mmap | None = None
_count_pid = 0
_open_lock = threading.Lock()


def record(n: int) -> None:
    _starts.append(time.time())
    _numbers.append(n)
    if not _count_pid:
        with _open_lock:  # sync handlers record from several threads: one opens the page
            if not _count_pid:
                _open_count()
    if _count is not None:
        _count[:8] = len(_numbers).to_bytes(8, "little")


def _forget_count() -> None:
    """In a forked child: open a page of its own at its first record (not os.getpid() per
    record: a system call, ~0.2 us a job, which every system's handler paid)."""
    global _count, _count_pid
    _count, _count_pid = None, 0


os.register_at_fork(after_in_child=_forget_count)


def _open_count() -> None:
    """This process's count page (reopened in a forked child, which must not share it)."""
    global _count, _count_pid
    _count_pid = os.getpid()
    _count = None
    directory = os.environ.get("BENCH_RECORD_DIR")
    if directory:
        path = Path(directory) / f"{_count_pid}.count"
        with path.open("w+b") as f:
            f.write(bytes(8))
            f.flush()
            _count = mmap.mmap(f.fileno(), 8)


def started_so_far(directory: Path) -> int:
    """Jobs the handlers of the worker processes writing to ``directory`` have started."""
    total = 0
    for path in directory.glob("*.count"):
        total += int.from_bytes(path.read_bytes()[:8], "little")
    return total


def dump() -> None:
    """Write this process's records now (also done at exit)."""
    _dump()


def _dump() -> None:
    directory = os.environ.get("BENCH_RECORD_DIR")
    if not directory:
        return
    path = Path(directory) / f"{os.getpid()}.bin"
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        f.write(len(_numbers).to_bytes(8, "little"))
        _numbers.tofile(f)
        _starts.tofile(f)
    tmp.rename(path)


atexit.register(_dump)


def load(directory: Path) -> tuple[list[int], list[float]]:
    """All (numbers, start times) recorded by the worker processes that wrote to ``directory``."""
    numbers: array[int] = array("q")
    starts: array[float] = array("d")
    for path in sorted(directory.glob("*.bin")):
        data = path.read_bytes()
        count = int.from_bytes(data[:8], "little")
        numbers.frombytes(data[8 : 8 + 8 * count])
        starts.frombytes(data[8 + 8 * count : 8 + 16 * count])
    return list(numbers), list(starts)
