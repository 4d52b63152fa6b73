"""One ``skiplock worker`` process: its worker run until a stop signal, and its exit.

SIGTERM or SIGINT stops claiming and gives running jobs the shutdown grace; a second signal
(not the same one delivered twice within :data:`SIGNAL_ECHO`) exits at once.  A sync task that
ignored its cancel flag does not keep the process alive after the worker has stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time

from skiplock.worker import Worker

SIGNAL_ECHO = 1.0  # seconds within which a second stop signal counts as the same one


async def run_worker(runner: Worker) -> None:
    """Run ``runner`` until it stops, stopping it on the first SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    signals = 0
    first_signal = 0.0

    def on_signal() -> None:
        nonlocal signals, first_signal
        if signals and time.monotonic() - first_signal < SIGNAL_ECHO:
            return  # the same stop request delivered twice (e.g. systemd and a supervisor)
        signals += 1
        first_signal = first_signal or time.monotonic()
        if signals == 1:
            logging.getLogger("skiplock.worker").info(
                "stopping: no new jobs; running ones get %.0fs (signal again to exit now)",
                runner.shutdown_grace,
            )
            runner.stop()
        else:
            logging.getLogger("skiplock.worker").warning("exiting now")
            os._exit(130)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await runner.run()


def exit_despite_stuck_threads(code: int) -> None:
    """A sync task that ignored its cancel flag still runs in its thread; its job was released
    already, so exit now rather than wait for it at interpreter shutdown."""
    threads = [t for t in threading.enumerate() if t.name.startswith("skiplock-task")]
    for thread in threads:
        thread.join(timeout=0.5)  # idle pool threads exit as soon as they see the shutdown
    busy = [t for t in threads if t.is_alive()]
    if busy:
        logging.getLogger("skiplock.worker").warning(
            "%d sync task(s) still running in threads after shutdown; exiting anyway", len(busy)
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
