"""The rows of a claim that could not all be read at once, read one value at a time.

A claim has already taken its jobs when the worker reads its rows (a leased claim has even
committed).  A row with a value Python cannot hold (a time of ``-infinity`` or after year 9999,
meta nested too deep for the JSON decoder) would make reading the whole result fail, and with
it every job of the claim: left running, unknown to the worker, until their leases expire.  So
when reading the result fails, each value is read on its own: one that cannot be read makes its
row an :class:`~skiplock.job.UnrunnableJob` saying why, which the worker fails at once, and the
other rows become jobs as usual.  Only then: a claim whose rows all read costs nothing more.
No I/O here: the result is in memory.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncCursor, Cursor
from psycopg.abc import Loader
from psycopg.pq import Format

from skiplock.job import Job, UnrunnableJob, undecodable

_TIMESTAMPTZ_OID = 1184
_INT64 = struct.Struct(">q")
_EARLIEST = datetime.min.replace(tzinfo=UTC)  # stands for a time before year 1
_LATEST = datetime.max.replace(tzinfo=UTC)  # and for one after year 9999
# The columns a claim writes itself, which name the claim: without them the job cannot even be
# failed.  Every other column holds what whoever inserted the row wrote.
_CLAIM = frozenset({"id", "status", "attempts", "locked_by", "locked_at"})
_JSON = frozenset({"meta"})


def claimed_jobs(cur: Cursor[Any] | AsyncCursor[Any]) -> list[Job]:
    """The jobs of the claim result on ``cur``, each row read on its own: see the module doc."""
    result = cur.pgresult
    assert result is not None
    names = [(result.fname(col) or b"").decode() for col in range(result.nfields)]
    loaders = [_loader(cur, result.ftype(col), result.fformat(col)) for col in range(len(names))]
    jobs = []
    for row in range(result.ntuples):
        values: list[Any] = []
        problems: list[str] = []
        for col, (name, loader) in enumerate(zip(names, loaders, strict=True)):
            data = result.get_value(row, col)
            if data is None:
                values.append(None)
                continue
            try:
                values.append(loader.load(data))
            except Exception as exc:
                if name in _CLAIM:  # nothing to fail the job by
                    raise
                value: Any = "{}" if name == "payload" else None  # (payload: JSON text)
                if result.ftype(col) == _TIMESTAMPTZ_OID:
                    shown, value = _unreadable_time(bytes(data), result.fformat(col))
                    problem = f"is {shown}, outside the years 1-9999 that Python's datetime holds"
                elif name in _JSON:
                    problem = f"could not be decoded: {undecodable(exc)}"
                else:  # text that is not UTF-8 (a database in SQL_ASCII), say
                    problem = f"could not be read: {type(exc).__name__}: {exc}"
                problems.append(f"{name} {problem}")
                values.append(value)
        job = Job.from_claimed_row(tuple(values))
        jobs.append(UnrunnableJob.of_job(job, "; ".join(problems)) if problems else job)
    return jobs


def _loader(cur: Cursor[Any] | AsyncCursor[Any], oid: int, fmt: int) -> Loader:
    loader = cur.adapters.get_loader(oid, Format(fmt))
    if loader is None:  # as psycopg does: a type it does not know comes back as text
        loader = cur.adapters.get_loader(0, Format(fmt))
    assert loader is not None
    return loader(oid, cur)


def _unreadable_time(data: bytes, fmt: int) -> tuple[str, datetime]:
    """How to name a timestamp Python cannot hold, and the datetime to stand for it."""
    if fmt == Format.BINARY:  # microseconds since 2000-01-01; the extremes are the infinities
        micros = _INT64.unpack(data)[0]
        if micros == -(2**63):
            return "-infinity", _EARLIEST
        if micros == 2**63 - 1:
            return "infinity", _LATEST
        return ("before year 1", _EARLIEST) if micros < 0 else ("after year 9999", _LATEST)
    text = data.decode("ascii", "replace")
    if text in ("infinity", "-infinity"):
        return text, _EARLIEST if text.startswith("-") else _LATEST
    return repr(text), _EARLIEST if " BC" in text else _LATEST
