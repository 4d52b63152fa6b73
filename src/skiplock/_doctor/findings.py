"""What ``skiplock doctor`` reports: one :class:`Finding` per check, judged by the rules in
:class:`Thresholds`; and how findings word ages and sizes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from skiplock._db.connections import worker_connections
from skiplock.app import DEFAULT_RETENTION

Status = Literal["ok", "warn", "fail"]
STATUS_ORDER: dict[str, int] = {"ok": 0, "warn": 1, "fail": 2}
COUNT_CAP = 1_000_000  # rows counted at most by one check, so doctor stays cheap


@dataclass(frozen=True)
class Thresholds:
    """When a finding becomes ``warn`` (see :mod:`skiplock._doctor.command` for each rule)."""

    transaction_seconds: float = 60.0
    dead_tuples: int = 10_000
    dead_ratio: float = 0.2
    lease_grace: float = 30.0
    index_min_bytes: int = 50 * 1024 * 1024
    index_factor: float = 10.0
    retention: Mapping[str, float | None] = field(default_factory=lambda: dict(DEFAULT_RETENTION))
    retention_grace: float = 3600.0
    listen_timeout: float = 1.0
    # A worker process's sessions at most, at the CLI's defaults (--concurrency 10, leased).
    connections_per_worker: int = worker_connections(10)
    # The fleet's worker processes (``--workers``), whose sessions the headroom is judged by.
    workers: int | None = None
    lock_seconds: float = 5.0


@dataclass
class Finding:
    check: str
    status: Status
    message: str
    fix: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def worst(findings: list[Finding]) -> Status:
    status: Status = "ok"
    for f in findings:
        status = worse(status, f.status)
    return status


def worse(a: Status, b: Status) -> Status:
    return a if STATUS_ORDER[a] >= STATUS_ORDER[b] else b


def duration(seconds: float | None) -> str:
    """``seconds`` in the unit that reads best: 42.0s, 17min, 3.5h, 2.0d (``never`` for None)."""
    if seconds is None:
        return "never"
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def byte_size(n: int) -> str:
    """``n`` bytes as B, kB, MB or GB."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("kB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"
