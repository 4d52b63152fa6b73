"""Batched recording of job outcomes: one statement per kind of outcome per flush.

Finished jobs wait in a buffer for at most ``flush_interval`` seconds (a few milliseconds), or
not at all once no job that could join the batch is still running; then all completions are
written with one ``job_*_many`` statement, all failures with another, and so on.  Each statement
still checks every claim's ownership; the ids it returns are the outcomes that counted, the rest
belonged to claims that had lost their job.  A crash loses at most the buffered outcomes, whose
jobs then run again once their leases expire (at-least-once).

Up to ``max_writes`` (2) writes are in flight at once, each on a pooled connection of its own:
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
from typing import Any, NamedTuple

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from skiplock._db.records import FailedAttempt, Snooze, TaskResult
from skiplock._db.store_async import AsyncStore
from skiplock._runtime.execution import Outcome, storable
from skiplock.errors import SkiplockError
from skiplock.job import Job

log = logging.getLogger("skiplock.worker")

Entry = tuple[Job, Outcome, float]  # the job, how it ended, when it started (monotonic)


class Recorded(NamedTuple):  # one per job: a tuple is the cheapest record
    job: Job
    outcome: Outcome
    owned: bool
    started: float


class Completer:
    def __init__(
        self,
        store: AsyncStore,
        pool: AsyncConnectionPool,
        completion: str,
        *,
        on_recorded: Callable[[list[Recorded]], None],
        still_running: Callable[[], int] = lambda: 0,
        flush_interval: float = 0.002,
        max_batch: int = 1000,
        max_writes: int = 2,
    ) -> None:
        self.store = store
        self.pool = pool
        self.completion = completion
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
        try:
            try:
                async with self.pool.connection() as conn:
                    owned = await self.write(conn, batch)
            finally:
                self._writing -= len(batch)
        except (psycopg.Error, SkiplockError) as exc:
            if _refused(exc):
                # The database refused an outcome (not the connection): written one at a time,
                # so that one it refuses does not hold up the others, for good.
                return await self._write_apart(batch)
            log.warning("could not record %d job outcomes, retrying: %s", len(batch), exc)
            self._buffer[:0] = batch
            self._trouble = True
            self._ready.set()
            return False
        except BaseException:
            self._buffer[:0] = batch  # cut short: not known to be written, so kept
            raise
        self.on_recorded([Recorded(job, outcome, job.id in owned, s) for job, outcome, s in batch])
        return True

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
        async with self.pool.connection() as conn:
            try:
                owned = await self.write(conn, [(job, outcome, started)])
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
                owned = await self.write(conn, [(job, outcome, started)])
        return job.id in owned, outcome

    async def write(self, conn: AsyncConnection[Any], batch: Sequence[Entry]) -> set[int]:
        """Write outcomes on ``conn``; returns the ids whose claims still owned their jobs."""
        kinds: dict[str, list[tuple[Job, Outcome]]] = {}
        for job, outcome, _ in batch:
            if outcome.kind in ("retry", "failed"):
                group = "fail"
            else:  # done jobs whose tasks returned a result to store are written apart
                group = "result" if outcome.result is not None else outcome.kind
            kinds.setdefault(group, []).append((job, outcome))
        owned: set[int] = set()
        # Several kinds go in one transaction, so a retried flush never finds half of its batch
        # already written (the held-lock caller is in a transaction already); so do results
        # stored before their jobs are archived (two statements).
        archived_results = "result" in kinds and self.completion == "archive"
        several = len(kinds) > 1 or archived_results
        async with conn.transaction() if several else contextlib.nullcontext():
            for kind, entries in kinds.items():
                owned |= await self._write_kind(conn, kind, entries)
        return owned

    async def _write_kind(
        self, conn: AsyncConnection[Any], kind: str, entries: list[tuple[Job, Outcome]]
    ) -> set[int]:
        claims = [job.claim for job, _ in entries]
        if kind == "done":
            return await self.store.job_finish_many(conn, claims, self.completion)
        if kind == "result":
            results = [
                TaskResult(job.claim, o.result) for job, o in entries if o.result is not None
            ]
            return await self.store.job_finish_with_results_many(conn, results, self.completion)
        if kind == "snooze":
            return await self.store.job_snooze_many(
                conn, [Snooze(job.claim, o.delay) for job, o in entries]
            )
        if kind == "cancelled":
            return await self.store.job_cancel_claimed_many(conn, claims)
        if kind == "release":
            return await self.store.job_release_many(conn, claims)
        failures = [
            FailedAttempt(job.claim, o.error or "", o.delay if o.kind == "retry" else None)
            for job, o in entries
        ]
        return set(await self.store.job_fail_many(conn, failures))


# SQLSTATE classes of a statement refused for what it wrote (a value out of range, a constraint,
# a server limit such as an oversized index row): the same outcome would be refused again.
# Anything else (a lost connection, a timeout, a deadlock, a full disk) may pass on another try.
REFUSED_CLASSES = ("22", "23", "54")


def _refused(exc: BaseException) -> bool:
    """Whether a failed write was refused for an outcome it held, not for the state of the
    database or the connection."""
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "")[:2] in REFUSED_CLASSES
