"""What a row of the ``workers`` table means in time: how often a worker reports, when it counts
as silent, and when its row is deleted.  Shared by the statements that read the table
(``queue_status``, ``presence_list``, the doctor's checks) and the worker runtime that writes it
(:mod:`skiplock._runtime.presence`)."""

from __future__ import annotations

PRESENCE_INTERVAL = 5.0  # seconds between two reports of a worker
SILENT_AFTER = 3 * PRESENCE_INTERVAL  # a row older than this: the worker stopped answering
GONE_AFTER = 3600.0  # a row older than this is deleted by the maintenance leader


def is_silent(seen_ago: float) -> bool:
    """Whether a worker that last reported ``seen_ago`` seconds ago has stopped answering."""
    return seen_ago > SILENT_AFTER
