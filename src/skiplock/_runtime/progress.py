"""Progress of running jobs (``ctx.progress``): a task sets its job's slot, which costs no I/O;
the worker's writer (:mod:`skiplock._runtime.progress_writer`) sends the slots that changed
once a second, all in one statement a model, so a job is written at most once a second however
often it reports.  A value set after the
last write of a job that then finishes is dropped with it: the outcome says more.  Why a side
table: docs/design.md, "Progress of a running job: a side table"."""

from __future__ import annotations

import math
import threading

STATUS_MAX_CHARS = 200  # the CHECK jobs_bound_progress_status of migration 0019


def checked_progress(progress: float, status: str | None) -> tuple[float, str | None]:
    """``progress`` as a float in 0..1 and ``status`` as at most STATUS_MAX_CHARS characters,
    or ValueError/TypeError: the table's CHECKs would refuse them, later and for the batch."""
    if isinstance(progress, bool) or not isinstance(progress, (int, float)):
        raise TypeError(f"progress must be a number from 0 to 1, got {progress!r}")
    value = float(progress)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"progress must be from 0 to 1, got {progress!r}")
    if status is not None:
        if not isinstance(status, str):
            raise TypeError(f"status must be a string, got {type(status).__name__}")
        if len(status) > STATUS_MAX_CHARS:
            raise ValueError(
                f"status must be at most {STATUS_MAX_CHARS} characters, got {len(status)}"
            )
        if "\x00" in status:
            raise ValueError("status must not contain NUL characters")
    return value, status


class ProgressSlot:
    """The last progress a job's task reported and not yet written (None: nothing new)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: tuple[float, str | None] | None = None

    def set(self, progress: float, status: str | None) -> None:
        with self._lock:
            self._pending = (progress, status)

    def take(self) -> tuple[float, str | None] | None:
        with self._lock:
            pending, self._pending = self._pending, None
        return pending
