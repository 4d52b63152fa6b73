"""``skiplock worker --processes N``: N worker processes on one host, kept alive.

The supervisor starts each worker as ``python -m skiplock worker ... --processes 1``, restarts
one that dies (logging its exit status, backing off when it keeps dying at start) or recycles
itself (``--max-jobs``, ``--max-memory``: exit status 75, replaced at once), and passes
SIGTERM/SIGINT on to all of them: they shut down gracefully and the supervisor exits 0 once
they have.  A second signal kills them at once.  With ``--burst`` each worker runs once, as
``--processes 1 --burst`` would: none is restarted, and the supervisor exits once all have,
with 0 if every one did (a failing burst is reported, not retried forever).
Children run in their own process group (a terminal's Ctrl-C reaches only the supervisor) and
get SIGTERM if the supervisor itself dies.

With ``--metrics-port`` the supervisor serves the metrics of all its children on that one
port: each child writes its totals to a private directory, which a scrape adds up (see
:class:`~skiplock.observability.metrics.AggregateCollector`), the totals of replaced children
included.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from skiplock._runtime.recycling import RECYCLED_EXIT

log = logging.getLogger("skiplock._runtime.supervisor")

# Set in each child's environment: the child runs the worker itself, whatever its options.
SUPERVISED_VAR = "SKIPLOCK_SUPERVISED"
PR_SET_PDEATHSIG = 1
QUICK_DEATH = 5.0  # a worker that dies sooner than this after starting backs off
MAX_BACKOFF = 30.0


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def _prepare_child() -> None:
    """In the child, before it runs the worker: take stop signals again (the supervisor holds
    them while it starts a child), and get SIGTERM (a graceful stop) if the supervisor dies,
    even by SIGKILL."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextmanager
def _stop_signals_held() -> Iterator[None]:
    """Hold SIGTERM/SIGINT until the block ends; one that came meanwhile is handled then."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class Supervisor:
    def __init__(
        self,
        worker_args: Sequence[str],
        processes: int,
        *,
        burst: bool = False,
        metrics_port: int | None = None,
        metrics_addr: str = "127.0.0.1",
        version: str = "",
        program: Sequence[str] | None = None,
    ) -> None:
        # ``program``: what runs skiplock's CLI in a child (default ``python -m skiplock``)
        self.command = [
            *(program or [sys.executable, "-m", "skiplock"]),
            "worker",
            *worker_args,
            "--processes",
            "1",
            *(["--burst"] if burst else []),
        ]
        self.processes = processes
        self.burst = burst
        self.metrics_port = metrics_port  # served here, for all the children
        self.metrics_addr = metrics_addr
        self.version = version
        self.metrics_dir: str | None = None  # where the children write their totals
        self._metrics_server: Any = None
        self.children: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
        self.restarts = 0
        self.signals = 0
        self._told: dict[int, int] = {}  # child pid -> stop requests passed on to it (1 or 2)
        self._failures: dict[int, int] = {}  # slot -> consecutive quick deaths

    def _start(self, slot: int) -> None:
        # A stop request that comes while a child starts waits until the child is in
        # self.children, so that the handler passes it on; none starts after one.
        with _stop_signals_held():
            if self.signals:
                return
            # Own process group: a Ctrl-C reaches the supervisor only, which forwards SIGTERM.
            command = self.command
            if self.metrics_dir is not None:
                command = [*command, "--metrics-dir", self.metrics_dir]
            child = subprocess.Popen(
                command,
                process_group=0,
                preexec_fn=_prepare_child,
                env={**os.environ, SUPERVISED_VAR: "1"},
            )
            self.children[slot] = (child, time.monotonic())
        log.info("worker process %d started (pid %d)", slot, child.pid)

    def serve_metrics(self) -> None:
        """Serve the children's metrics, added up, on ``metrics_port`` (OSError: the port
        cannot be had); call before :meth:`run`."""
        from prometheus_client import CollectorRegistry, start_http_server

        from skiplock.observability.metrics import AggregateCollector

        assert self.metrics_port is not None
        self.metrics_dir = tempfile.mkdtemp(prefix="skiplock-metrics-")
        registry = CollectorRegistry()
        registry.register(AggregateCollector(self.metrics_dir, self._live_pids, self.version))
        try:
            self._metrics_server, _ = start_http_server(
                self.metrics_port, self.metrics_addr, registry=registry
            )
        except OSError:
            self._remove_metrics_dir()
            raise

    def _live_pids(self) -> set[int]:
        return {child.pid for child, _ in list(self.children.values()) if child.poll() is None}

    def _remove_metrics_dir(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        if self.metrics_dir is not None:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Counted only; the main loop passes it on.  Held in this thread while a child starts,
        # the signal can still reach another thread of the process, and its handler then runs
        # here before the new child is registered: passing it on from the handler missed that
        # child, which ran on alone (a CI run of the test suite caught it).
        self.signals += 1

    def _pass_on_stop(self) -> None:
        """Send each live child what the stop requests so far ask for, once: SIGTERM for the
        first (a graceful stop), SIGKILL from the second."""
        level = min(self.signals, 2)
        if not level:
            return
        for child, _ in self.children.values():
            if self._told.get(child.pid, 0) >= level or child.poll() is not None:
                continue
            if not self._told:
                log.info(
                    "stopping %d worker processes (signal again to kill them)", len(self.children)
                )
            child.send_signal(signal.SIGTERM if level == 1 else signal.SIGKILL)
            self._told[child.pid] = level

    def _stopped_cleanly(self, code: int) -> bool:
        """0; or, after one stop request, killed by the SIGTERM it passed on (or the terminal's
        SIGINT) before it had set up its handler: a child still starting has claimed nothing."""
        if code in (0, RECYCLED_EXIT):  # recycled just before the stop: nothing was cut short
            return True
        return self.signals == 1 and code in (-signal.SIGTERM, -signal.SIGINT)

    def run(self) -> int:
        try:
            return self._run()
        finally:
            self._remove_metrics_dir()

    def _run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for slot in range(self.processes):
            self._start(slot)
        not_before: dict[int, float] = {}
        while True:
            time.sleep(0.2)
            self._pass_on_stop()
            alive = 0
            for slot, (child, started) in list(self.children.items()):
                code = child.poll()
                if code is None:
                    alive += 1
                    continue
                if self.signals or self.burst:
                    continue  # stopping, or its burst is over
                if slot not in not_before and code == RECYCLED_EXIT:
                    log.info(
                        "worker process %d (pid %d) recycled; starting a fresh one", slot, child.pid
                    )
                    self._failures[slot] = 0
                    not_before[slot] = time.monotonic()
                elif slot not in not_before:
                    quick = time.monotonic() - started < QUICK_DEATH
                    self._failures[slot] = self._failures.get(slot, 0) + 1 if quick else 0
                    delay = min(MAX_BACKOFF, 0.5 * 2 ** self._failures[slot]) if quick else 0.0
                    log.warning(
                        "worker process %d (pid %d) exited with status %s; restarting in %.1fs",
                        slot, child.pid, code, delay,
                    )  # fmt: skip
                    not_before[slot] = time.monotonic() + delay
                if time.monotonic() >= not_before[slot]:
                    del not_before[slot]
                    self.restarts += 1
                    self._start(slot)
                    alive += 1
            if alive or not (self.signals or self.burst):
                continue
            codes = [child.returncode for child, _ in self.children.values()]
            clean = all(self._stopped_cleanly(c) for c in codes)
            level = logging.INFO if clean else logging.WARNING
            log.log(level, "all worker processes stopped (exit statuses %s)", codes)
            return 0 if clean else 1
