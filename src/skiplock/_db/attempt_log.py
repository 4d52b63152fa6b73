"""A job's attempt history as the admin surfaces show it: the entries of its ``attempt_log``
(migration 0018: each attempt that ended without success, and an archived job's done attempt),
then the attempt its row tells of (running now, or done), which no statement writes to the log
(see the migration: a job that succeeds pays nothing for its history).  Pure, no I/O.
"""

from __future__ import annotations

from typing import Any

from skiplock.job import Job


def attempt_history(job: Job, log: Any) -> list[dict[str, Any]]:
    """Oldest first: dicts of attempt, worker, started_at, ended_at (ISO text or None), outcome
    and error.  A log that is not a list of objects (written by hand) shows as no entries."""
    entries = [dict(e) for e in log if isinstance(e, dict)] if isinstance(log, list) else []
    status = str(job.status)
    logged = {e.get("attempt") for e in entries}
    if status in ("running", "done") and job.attempts >= 1 and job.attempts not in logged:
        entries.append(
            {
                "attempt": job.attempts,
                "worker": job.locked_by,
                "started_at": _text(job.locked_at),
                "ended_at": _text(job.finished_at) if status == "done" else None,
                "outcome": status,
                "error": None,
            }
        )
    return entries


def _text(value: Any) -> str | None:
    """A timestamp as ISO text (a row's value Python could not hold is text already)."""
    return None if value is None else value.isoformat() if hasattr(value, "isoformat") else value
