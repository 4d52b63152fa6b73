"""The application's job and schema administration: migrate, read, wait for, retry and cancel
jobs (one, or every match of a filter), delete finished ones.  A mixin of
:class:`~skiplock.app.App`, whose clients run the statements; the sync methods are for scripts,
Django and Flask, the ``_async`` ones for asyncio code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from skiplock._db.client_async import AsyncClient
from skiplock._db.client_sync import SyncClient
from skiplock._db.migration_lock import LOCK_TIMEOUT as MIGRATE_LOCK_TIMEOUT
from skiplock._db.migration_lock import LOCK_WAIT as MIGRATE_LOCK_WAIT
from skiplock.bulk import (
    CancelledJobs,
    DeletedJobs,
    JobFilter,
    RetriedJobs,
    delete_statuses,
    retry_statuses,
)
from skiplock.job import Job


class JobAdmin:
    # Set by App.__init__.
    sync_client: SyncClient
    async_client: AsyncClient

    def migrate(
        self, *, lock_wait: float = MIGRATE_LOCK_WAIT, lock_timeout: float = MIGRATE_LOCK_TIMEOUT
    ) -> list[int]:
        """Create or upgrade skiplock's tables; returns the migration versions applied now.
        Waits at most ``lock_wait`` seconds for another migrator, and each statement at most
        ``lock_timeout`` seconds for a lock on a table (:class:`~skiplock.errors.MigrationLockBusy`
        then, nothing applied); with nothing to apply, takes no lock."""
        return self.sync_client.migrate(lock_wait=lock_wait, lock_timeout=lock_timeout)

    async def migrate_async(
        self, *, lock_wait: float = MIGRATE_LOCK_WAIT, lock_timeout: float = MIGRATE_LOCK_TIMEOUT
    ) -> list[int]:
        return await self.async_client.migrate(lock_wait=lock_wait, lock_timeout=lock_timeout)

    def get_job(self, job_id: int) -> Job | None:
        return self.sync_client.get_job(job_id)

    async def get_job_async(self, job_id: int) -> Job | None:
        return await self.async_client.get_job(job_id)

    def wait_for_job(self, job_id: int, timeout: float = 60.0, poll: float = 0.1) -> Job:
        """The job once it has finished (done, failed or cancelled), read every ``poll``
        seconds; ``TimeoutError`` after ``timeout`` seconds, ``LookupError`` if there is no
        such job (it may have been deleted: completion='delete', pruned)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if finished(job_id, job, deadline, timeout):
                assert job is not None
                return job
            time.sleep(poll)

    async def wait_for_job_async(
        self, job_id: int, timeout: float = 60.0, poll: float = 0.1
    ) -> Job:
        deadline = time.monotonic() + timeout
        while True:
            job = await self.get_job_async(job_id)
            if finished(job_id, job, deadline, timeout):
                assert job is not None
                return job
            await asyncio.sleep(poll)

    def retry_job(self, job_id: int) -> bool:
        """Give a failed or cancelled job one more attempt now; False if it is in another state.
        Raises :class:`IdempotencyConflict` if an unfinished job holds its idempotency key."""
        return self.sync_client.retry_job(job_id)

    def retry_jobs(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        statuses: Iterable[str] = ("failed",),
        finished_within: float | None = None,
    ) -> RetriedJobs:
        """Give every failed (and/or cancelled) job of ``queue`` and ``task`` (None: any),
        finished in the last ``finished_within`` seconds (None: whenever), one more attempt now,
        in batches of short transactions.  Jobs whose idempotency key an unfinished job holds
        stay as they are and are counted as skipped."""
        jobs = JobFilter(queue, task, finished_within)
        return self.sync_client.retry_jobs(jobs, retry_statuses(statuses))

    def cancel_job(self, job_id: int) -> bool:
        """Cancel a job that has not started; False if it already started or finished."""
        return self.sync_client.cancel_job(job_id)

    def cancel_jobs(
        self, *, queue: str | None = None, task: str | None = None, running: bool = False
    ) -> CancelledJobs:
        """Cancel every job of ``queue`` and ``task`` (None: any) that has not started, in batches
        of short transactions; with ``running``, also ask the workers running the matching leased
        jobs to cancel them (held-lock jobs cannot be interrupted and are left to finish)."""
        return self.sync_client.cancel_jobs(JobFilter(queue, task), running=running)

    def delete_jobs(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        statuses: Iterable[str] = ("done", "failed", "cancelled"),
        finished_within: float | None = None,
        older_than: float | None = None,
    ) -> DeletedJobs:
        """Delete every finished (done, failed and/or cancelled) job of ``queue`` and ``task``
        (None: any), finished in the last ``finished_within`` seconds and at least
        ``older_than`` seconds ago (None: whenever), in batches of short transactions.  Never an
        unfinished job; a failed or cancelled job that a waiting job depends on is kept and
        counted as skipped."""
        jobs = JobFilter(queue, task, finished_within, older_than)
        return self.sync_client.delete_jobs(jobs, delete_statuses(statuses))


def finished(job_id: int, job: Job | None, deadline: float, timeout: float) -> bool:
    """Whether a waited-for job has finished; raises if it never will within the wait."""
    if job is None:
        raise LookupError(f"no job {job_id} (never enqueued, or deleted when it finished)")
    if job.status.finished:
        return True
    if time.monotonic() >= deadline:
        raise TimeoutError(f"job {job_id} is still {job.status.value} after {timeout:g}s")
    return False
