"""Finding jobs by a payload field (the admin surfaces' search): the filter, checked, and what
one bounded search found.  Pure, no I/O; the statement is ``job_search`` in admin.sql.

There is no index on the payload: a GIN index would be written by every enqueue (see
docs/design.md, "Payload search without an index").  A search therefore tests at most
:data:`SEARCH_SCAN` jobs (newest first, after the queue, status and task filters) per request
and says how far down it read; the next request continues below that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from skiplock.job import Job

SEARCH_SCAN = 10_000  # jobs read per search request (see bench/README.md for the times)
MAX_KEY = 200
MAX_VALUE = 1000


def payload_filter(key: str, value: str) -> str:
    """The JSON a payload must contain for ``key`` = ``value`` (top-level key), for jsonb ``@>``.
    ``value`` is read as JSON when it is JSON (``42``, ``true``, ``"x"``, ``{"a": 1}``), else
    taken as a string.  Raises ValueError for an empty or too long key or value."""
    if not key or len(key) > MAX_KEY:
        raise ValueError(f"a payload key is 1 to {MAX_KEY} characters")
    if len(value) > MAX_VALUE:
        raise ValueError(f"a payload value is at most {MAX_VALUE} characters")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    return json.dumps({key: parsed})


@dataclass(frozen=True)
class FoundJobs:
    """One page of a search: the ``jobs`` found (newest first); ``next_before``, the id to
    search below next (None: every job was read); ``scanned``, how many jobs were read."""

    jobs: list[Job]
    next_before: int | None
    scanned: int
