"""The dashboard's charts of the last hour: per queue and minute, the jobs that finished done
and failed and how long they waited to start (their last attempt's start minus its due time).
Pure, no I/O; the statement is ``job_finished_per_minute`` in admin.sql.

They are aggregated from two sources, each finished job in exactly one: the finished jobs
still in the jobs table, read newest first through the index pruning uses, at most
:data:`CHART_SCAN` a request (so a busy hour costs no more than that, and the page says from
which minute on its numbers are whole); and the counts that the statements removing finished
jobs write in the same statement (``finished_counts``: completion="delete" and "archive",
pruning, the bulk delete). The wait's 95th percentile is that of the counts' wait buckets
(docs/design.md, "Dashboard charts: an index-only read, and the jobs that left the table").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

CHART_MINUTES = 60  # the window the dashboard shows
MAX_CHART_MINUTES = 24 * 60
CHART_SCAN = 50_000  # finished jobs read per request (see bench/README.md for the times)


@dataclass(frozen=True)
class Minute:
    """One queue's minute: jobs that finished done and failed, and their wait in seconds
    (None: no job finished)."""

    done: int = 0
    failed: int = 0
    wait_mean: float | None = None
    wait_p95: float | None = None
    wait_max: float | None = None


@dataclass(frozen=True)
class FinishedPerMinute:
    """``minutes``: the start of each minute of the window, oldest first (the last one is the
    minute under way); ``queues``: per queue, a :class:`Minute` for each of them; ``scanned``:
    the finished jobs read; ``whole_from``: the first minute whose numbers are whole (None: all
    are; else the read stopped at its bound inside that minute's predecessor)."""

    minutes: list[datetime]
    queues: dict[str, list[Minute]] = field(default_factory=dict)
    scanned: int = 0
    whole_from: datetime | None = None

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]], *, minutes: int, scan: int) -> FinishedPerMinute:
        now: datetime = rows[0]["now"]
        last = now.replace(second=0, microsecond=0)
        starts = [last - timedelta(minutes=n) for n in range(minutes - 1, -1, -1)]
        index = {start: i for i, start in enumerate(starts)}
        queues: dict[str, list[Minute]] = {}
        for row in rows:
            if row["queue"] is None or row["minute"] not in index:
                continue
            series = queues.setdefault(row["queue"], [Minute() for _ in starts])
            series[index[row["minute"]]] = Minute(
                row["done"], row["failed"], row["wait_mean"], row["wait_p95"], row["wait_max"]
            )
        scanned: int = rows[0]["scanned"]
        whole_from = None
        if scanned >= scan and rows[0]["oldest"] is not None:
            whole_from = rows[0]["oldest"].replace(second=0, microsecond=0) + timedelta(minutes=1)
        return cls(starts, dict(sorted(queues.items())), scanned, whole_from)

    def to_json(self) -> dict[str, Any]:
        return {
            "minutes": [m.isoformat() for m in self.minutes],
            "scanned": self.scanned,
            "whole_from": self.whole_from.isoformat() if self.whole_from else None,
            "queues": {
                queue: [
                    {"done": m.done, "failed": m.failed, "wait_mean": m.wait_mean,
                     "wait_p95": m.wait_p95, "wait_max": m.wait_max}
                    for m in series
                ]
                for queue, series in self.queues.items()
            },
        }  # fmt: skip
