"""Batched recording of job outcomes: one statement per kind of outcome per flush.

Finished jobs wait in a buffer for at most ``flush_interval`` seconds (a few milliseconds), or
not at all once no job that could join the batch is still running; then all completions are
written with one call of the worker's backend (``complete``: one ``job_*_many`` statement on
PostgreSQL), all failures with another (``fail``), and so on.  Each call still checks every
claim's ownership; the ids it returns are the outcomes that counted, the rest belonged to claims
that had lost their job.  A batch of several kinds is written kind by kind: when a call fails,
the kinds written before it are reported, and only the rest are kept to be written again.  A
crash loses at most the buffered outcomes, whose jobs then run again once their leases expire
(at-least-once).

Up to ``max_writes`` (2) writes are in flight at once (on PostgreSQL each on a pooled connection):
the next batch gathers and goes out while the last one waits for its commit.  Outcomes in a
write that has not returned still count as unwritten (:attr:`Completer.pending`), so the
``--max-in-flight`` bound holds; a worker bounded that way claims only as its outcomes are
written, which is where two writes beat one (docs/design.md, "Two outcome writes in
flight").  A failed write puts its outcomes back at the
front of the buffer, and the next write waits a second; but a write the database refused for a
value it held (an outcome it cannot store) is written again one outcome at a time, and the one
refused fails its job instead, so that it does not hold up every later outcome.  A kept
outcome of a claim a server restart forgot cannot count for a new claim of its job: every write
names the claim's time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import psycopg
from psycopg import AsyncConnection

from skiplock._db.store_async import AsyncStore
from skiplock._runtime.execution import Outcome, storable
from skiplock._runtime.outcome_kinds import Entry, failures, grouped, results, snoozes, write_held
from skiplock.backends.base import Backend, Completion
from skiplock.errors import SkiplockError
from skiplock.job import Job

log = logging.getLogger("skiplock.worker")


class Recorded(NamedTuple):  # one per job: a tuple is the cheapest record
    job: Job
    outcome: Outcome
    owned: bool
    started: float


class Completer:
    def __init__(
        self,
        store: AsyncStore,
        backend: Backend,
        completion: Completion,
        *,
        on_recorded: Callable[[list[Recorded]], None],
        still_running: Callable[[], int] = lambda: 0,
        flush_interval: float = 0.002,
        max_batch: int = 1000,
        max_writes: int = 2,
    ) -> None:
        self.store = store  # for held-lock jobs' outcomes (write)
        self.backend = backend  # for the rest
        self.completion: Completion = completion
        self.on_recorded = on_recorded
        self.still_running = still_running
        self.flush_interval = flush_interval
        self.max_batch = max_batch
        self.max_writes = max_writes
        self._buffer: list[Entry] = []
        self._writing = 0  # outcomes in writes that have not returned
        self._writes: set[asyncio.Task[bool]] = set()
        self._trouble = False  # a write failed: wait a moment before the next
        self._ready = asyncio.Event()
        self._complete = asyncio.Event()  # set when no running job can join the batch any more
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pending(self) -> int:
        """Outcomes not yet written: buffered, or in a write that has not returned."""
        return len(self._buffer) + self._writing

    def submit(self, job: Job, outcome: Outcome, started: float) -> None:
        self._buffer.append((job, outcome, started))
        self._ready.set()
        if not self.still_running():
            self._complete.set()

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self._run())
        return self._task

    async def stop(self) -> None:
        """Let the writes in progress finish (never cut a write short: its outcomes would be
        written twice and reported lost), stop the loop, then write what is still buffered."""
        self._stopping = True
        self._ready.set()
        if self._task is not None:
            await self._task
            self._task = None
        while self._buffer:
            if not await self.flush():
                log.error("%d job outcomes could not be recorded", len(self._buffer))
                break

    async def _run(self) -> None:
        try:
            while not self._stopping:
                await self._ready.wait()
                if self._trouble and not self._stopping:  # database trouble: try again soon
                    self._trouble = False
                    await asyncio.sleep(1.0)
                full = len(self._buffer) >= self.max_batch
                if not self._stopping and not full and self.still_running():
                    # Let a batch gather, but write at once when nothing else could join it:
                    # the worker's slots may all be waiting for this write.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._complete.wait(), self.flush_interval)
                while len(self._writes) >= self.max_writes:
                    await asyncio.wait(self._writes, return_when=asyncio.FIRST_COMPLETED)
                self._ready.clear()
                self._complete.clear()
                if self._buffer and not self._stopping:
                    write = asyncio.create_task(self._write_batch(self._take()))
                    self._writes.add(write)
                    write.add_done_callback(self._writes.discard)
                    if self._buffer:
                        self._ready.set()  # more than one batch is waiting
        finally:
            if self._writes:
                await asyncio.wait(self._writes)

    async def flush(self) -> bool:
        """Write up to ``max_batch`` buffered outcomes; False (keeping them) on a database error."""
        batch = self._take()
        return await self._write_batch(batch) if batch else True

    def _take(self) -> list[Entry]:
        batch = self._buffer[: self.max_batch]
        del self._buffer[: len(batch)]
        self._writing += len(batch)
        return batch

    async def _write_batch(self, batch: list[Entry]) -> bool:
        written: list[Entry] = []  # of the kinds written before a write failed
        owned: set[int] = set()
        try:
            try:
                for kind, entries in grouped(batch).items():
                    owned |= await self._write_kind(kind, entries)
                    written += entries
            finally:
                self._writing -= len(batch)
        except (psycopg.Error, SkiplockError) as exc:
            rest = self._recorded_but(written, owned, batch)
            if _refused(exc):
                # The database refused an outcome (not the connection): written one at a time,
                # so that one it refuses does not hold up the others, for good.
                return await self._write_apart(rest)
            log.warning("could not record %d job outcomes, retrying: %s", len(rest), exc)
            self._buffer[:0] = rest
            self._trouble = True
            self._ready.set()
            return False
        except BaseException:
            # Cut short: what is not known to be written is kept.
            self._buffer[:0] = self._recorded_but(written, owned, batch)
            raise
        owns = _owner(batch, owned)
        self.on_recorded([Recorded(job, outcome, owns(job), s) for job, outcome, s in batch])
        return True

    def _recorded_but(
        self, written: list[Entry], owned: set[int], batch: list[Entry]
    ) -> list[Entry]:
        """Report the outcomes of the kinds written before a write failed (each kind is a call
        of its own to the backend, so a retry must not write them again: their claims would
        own their jobs no more); the rest of ``batch``, in order."""
        if not written:
            return batch
        owns = _owner(batch, owned)
        self.on_recorded([Recorded(job, o, owns(job), s) for job, o, s in written])
        done = {id(entry) for entry in written}
        return [entry for entry in batch if id(entry) not in done]

    async def _write_apart(self, batch: list[Entry]) -> bool:
        """Write a refused batch's outcomes one at a time.  An outcome the database refuses on
        its own (a snooze past the years a timestamp holds, say) fails its job instead, saying
        why; if even that is refused, the job is left to its lease and reported lost.  A lost
        connection puts the outcomes not yet written back at the front of the buffer."""
        recorded: list[Recorded] = []
        self._writing += len(batch)
        try:
            for index, (job, outcome, started) in enumerate(batch):
                try:
                    owned, outcome = await self._write_one(job, outcome, started)
                except (psycopg.Error, SkiplockError) as exc:
                    if not _refused(exc):
                        log.warning("could not record %d job outcomes, retrying: %s",
                                    len(batch) - index, exc)  # fmt: skip
                        self._buffer[:0] = batch[index:]
                        self._trouble = True
                        self._ready.set()
                        return False
                    log.error("job %s: its outcome could not be recorded: %s", job.id, exc)
                    owned = False
                self._writing -= 1
                recorded.append(Recorded(job, outcome, owned, started))
        finally:
            self._writing -= len(batch) - len(recorded)
            if recorded:
                self.on_recorded(recorded)
        return True

    async def _write_one(self, job: Job, outcome: Outcome, started: float) -> tuple[bool, Outcome]:
        """Write one outcome, or, if the database refuses it, the job's failure saying why;
        whether the claim still owned the job, and the outcome written."""
        ((kind, entries),) = grouped([(job, outcome, started)]).items()
        try:
            owned = await self._write_kind(kind, entries)
        except (psycopg.Error, SkiplockError) as exc:
            if not _refused(exc):
                raise
            error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.error("job %s: its outcome (%s) was refused, failing it: %s", job.id,
                      outcome.kind, error)  # fmt: skip
            outcome = Outcome(
                "failed",
                error=storable(
                    f"its outcome ({outcome.kind}) could not be recorded: "
                    f"{type(exc).__name__}: {error}"
                ),
            )
            owned = await self._write_kind("fail", [(job, outcome, started)])
        return job.id in owned, outcome

    async def _write_kind(self, kind: str, entries: list[Entry]) -> set[int]:
        """Write one kind of outcome through the backend; the ids still owned."""
        backend = self.backend
        claims = [job.claim for job, _, _ in entries]
        if kind == "done":
            return await backend.complete(claims, completion=self.completion)
        if kind == "result":
            return await backend.complete(results(entries), completion=self.completion)
        if kind == "snooze":
            return await backend.snooze(snoozes(entries))
        if kind == "cancelled":
            return await backend.cancel_claimed(claims)
        if kind == "release":
            return await backend.release(claims)
        return set(await backend.fail(failures(entries)))

    async def write(self, conn: AsyncConnection[Any], batch: Sequence[Entry]) -> set[int]:
        """Write a held-lock job's outcomes on ``conn``, in its claim's transaction (on the
        PostgreSQL store: held-lock jobs are beyond the backend contract); returns the ids
        whose claims still owned their jobs."""
        return await write_held(self.store, conn, batch, self.completion)


def _owner(batch: Sequence[Entry], owned: set[int]) -> Callable[[Job], bool]:
    """Whether an outcome of ``batch`` counted, given the ids its writes changed.  A batch may
    hold two claims of one job (a claim whose lease ran out while its outcome waited, and this
    worker's new claim of the job): the writes check each claim and change the row once, for
    the newer claim, as the older one cannot own the job any more."""
    ids = [job.id for job, _, _ in batch]
    if len(set(ids)) == len(ids):
        return lambda job: job.id in owned
    newest: dict[int, tuple[datetime, int]] = {}
    for job, _, _ in batch:
        newest[job.id] = max(newest.get(job.id, _claim_order(job)), _claim_order(job))
    return lambda job: job.id in owned and newest[job.id] == _claim_order(job)


def _claim_order(job: Job) -> tuple[datetime, int]:
    """Later claims of a job sort after earlier ones."""
    return (job.locked_at or _NEVER, job.attempts)


_NEVER = datetime.min.replace(tzinfo=UTC)


# SQLSTATE classes of a statement refused for what it wrote (a value out of range, a constraint,
# a server limit such as an oversized index row): the same outcome would be refused again.
# Anything else (a lost connection, a timeout, a deadlock, a full disk) may pass on another try.
REFUSED_CLASSES = ("22", "23", "54")


def _refused(exc: BaseException) -> bool:
    """Whether a failed write was refused for an outcome it held, not for the state of the
    database or the connection."""
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "")[:2] in REFUSED_CLASSES
