"""An admin's requests to cancel held-lock jobs, read from the database.

A held-lock job's row is locked by the transaction it runs in, so an admin's cancel cannot
set the flag a leased job's heartbeat reads.  It records the request on the job's start
record instead (``held_starts``, migration 0013) and sends a NOTIFY.  A worker that LISTENs
stops the job at once (``HeldSlots._cancel_requested``).  Every held-lock worker also reads
the requests for the jobs it runs once per poll interval, the same fallback that claims have
for wake-ups: workers that cannot LISTEN (``--poll-only``, a transaction-mode pooler), and
requests whose NOTIFY was missed (sent while the listener reconnected), still stop the job.
A job whose request came after its claim and before its start reads it with its start
(``job_held_start_count``) and never runs.

A request belongs to the version of the job's row it was made on: a start from that version
reads it, an outcome or any other write of the row leaves it behind (the start record of the
next claim drops it), so it never cancels a later run the admin did not ask about.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

import psycopg
from psycopg_pool import AsyncConnectionPool

from skiplock._db.store_async import AsyncStore
from skiplock._runtime.running import RunningJob
from skiplock.errors import SkiplockError

log = logging.getLogger("skiplock.worker")


def held_and_running(jobs: Iterable[RunningJob]) -> dict[int, RunningJob]:
    """The started held-lock jobs that are not being stopped already, by id."""
    return {
        r.job.id: r
        for r in jobs
        if r.model == "held" and r.task is not None and r.stop_reason is None and not r.claim_gone
    }


async def watch_held_cancels(
    running: Callable[[], Iterable[RunningJob]],
    store: AsyncStore,
    pool: AsyncConnectionPool,
    interval: float,
) -> None:
    """Stop the held-lock jobs an admin asked to cancel, reading the requests every
    ``interval`` seconds while any such job runs here (one small statement)."""
    while True:
        await asyncio.sleep(interval)
        held = held_and_running(running())
        if not held:
            continue
        try:
            async with pool.connection() as conn:
                requested = await store.job_held_cancel_requests(conn, list(held))
        except (psycopg.Error, SkiplockError) as exc:
            log.warning("could not read the cancel requests of held-lock jobs: %s", exc)
            continue
        for job_id in sorted(requested):
            job = held[job_id]
            if not job.claim_gone:
                job.cancel_requested()
