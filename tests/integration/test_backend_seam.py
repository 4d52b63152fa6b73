"""An App given a backend of its own (``App(backend=...)``): its async enqueues and a real leasing
Worker's claims (through the backend's claimer, or its ``claim``), heartbeats, outcomes and
reclaims go through that backend's methods, so that another backend can be written without
touching App, Task or Worker.  The backend here is a recording wrapper around a real
PostgresBackend on the test's schema; nothing is mocked.  With the default PostgresBackend, the
worker's claims go through PostgreSQL's claimer, the tuned path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from helpers.polling import wait_for_async
from skiplock import App, Worker
from skiplock._runtime.completer import Completer, Recorded
from skiplock._runtime.execution import DONE, Outcome
from skiplock.backends import (
    Backend,
    CancelOutcome,
    Completion,
    FailedAttempt,
    NewJob,
    NewJobs,
    PostgresBackend,
    Snooze,
    TaskResult,
)
from skiplock.backends.claimer import Claimer, ClaimerSettings, claimer_of
from skiplock.backends.postgres_claimer import PostgresClaimer
from skiplock.job import Claim, Enqueued, Job, JobStatus


class RecordingBackend:
    """A backend that records each call (method, its jobs' ids) and hands it to ``inner``."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.calls: list[tuple[str, list[int]]] = []
        self.failing: set[str] = set()  # methods that fail once, as if the server were gone

    def _call(self, name: str, ids: list[int]) -> None:
        self.calls.append((name, ids))
        if name in self.failing:
            self.failing.discard(name)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    def ids(self, name: str) -> list[int]:
        return [job_id for called, ids in self.calls if called == name for job_id in ids]

    async def enqueue(
        self, jobs: Sequence[NewJob] | NewJobs, *, transaction: Any = None
    ) -> list[Enqueued]:
        enqueued = await self.inner.enqueue(jobs, transaction=transaction)
        self._call("enqueue", [e.id for e in enqueued])
        return enqueued

    async def claim(
        self, queues: Sequence[str], limit: int, worker: str, lease_seconds: float
    ) -> list[Job]:
        jobs = await self.inner.claim(queues, limit, worker, lease_seconds)
        self._call("claim", [j.id for j in jobs])
        return jobs

    async def extend(
        self, claims: Sequence[Claim], lease_seconds: float, *, now: datetime | None = None
    ) -> dict[int, bool]:
        self._call("extend", [c.job_id for c in claims])
        return await self.inner.extend(claims, lease_seconds, now=now)

    async def reclaim_expired(self, *, now: datetime | None = None) -> dict[int, JobStatus]:
        reclaimed = await self.inner.reclaim_expired(now=now)
        self._call("reclaim_expired", list(reclaimed))
        return reclaimed

    async def complete(
        self, done: Sequence[Claim | TaskResult], *, completion: Completion = "keep"
    ) -> set[int]:
        self._call("complete", [(d.claim if isinstance(d, TaskResult) else d).job_id for d in done])
        return await self.inner.complete(done, completion=completion)

    async def fail(self, failures: Sequence[FailedAttempt]) -> dict[int, JobStatus]:
        self._call("fail", [f.claim.job_id for f in failures])
        return await self.inner.fail(failures)

    async def snooze(self, snoozes: Sequence[Snooze]) -> set[int]:
        self._call("snooze", [s.claim.job_id for s in snoozes])
        return await self.inner.snooze(snoozes)

    async def cancel_claimed(self, claims: Sequence[Claim]) -> set[int]:
        self._call("cancel_claimed", [c.job_id for c in claims])
        return await self.inner.cancel_claimed(claims)

    async def release(self, claims: Sequence[Claim]) -> set[int]:
        self._call("release", [c.job_id for c in claims])
        return await self.inner.release(claims)

    async def promote_due(self, *, now: datetime | None = None) -> dict[str, int]:
        self._call("promote_due", [])
        return await self.inner.promote_due(now=now)

    async def set_key_limit(
        self,
        key: str,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        period: float = 1.0,
    ) -> None:
        self._call("set_key_limit", [])
        await self.inner.set_key_limit(key, concurrency=concurrency, rate=rate, period=period)

    async def cancel(self, job_id: int) -> CancelOutcome:
        self._call("cancel", [job_id])
        return await self.inner.cancel(job_id)

    async def get_job(self, job_id: int) -> Job | None:
        return await self.inner.get_job(job_id)

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: JobStatus | None = None,
        task: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[Job]:
        return await self.inner.list_jobs(
            queue=queue, status=status, task=task, limit=limit, before=before
        )

    async def close(self) -> None:
        await self.inner.close()


class ClaimerRecordingBackend(RecordingBackend):
    """The same, offering a claimer of its own: a worker claims through it, never ``claim``."""

    def claimer(self, settings: ClaimerSettings) -> Claimer:
        return RecordingClaimer(self, claimer_of(self.inner, settings))


class RecordingClaimer:
    def __init__(self, backend: RecordingBackend, inner: Claimer) -> None:
        self.backend = backend
        self.inner = inner

    async def claim(self, queues: Sequence[str], limit: int, startable: int) -> list[Job]:
        jobs = await self.inner.claim(queues, limit, startable)
        self.backend._call("claimer.claim", [j.id for j in jobs])
        return jobs

    async def close(self) -> None:
        self.backend._call("claimer.close", [])
        await self.inner.close()


if TYPE_CHECKING:
    _conforms: type[Backend] = RecordingBackend
    _claims: type[Claimer] = RecordingClaimer


@pytest.mark.parametrize("wrapper", [RecordingBackend, ClaimerRecordingBackend])
def test_a_worker_claims_and_finishes_through_the_apps_backend(
    pg_dsn: str, schema: str, wrapper: type[RecordingBackend]
) -> None:
    backend = wrapper(PostgresBackend(pg_dsn, schema))
    app = App(pg_dsn, schema, backend=backend)
    assert app.backend is backend

    @app.task(name="ok", queue="seam")
    async def ok(n: int) -> None:
        if n == 0:
            await asyncio.sleep(1.0)  # outlasts a few heartbeats (lease 0.9 s: one each 0.3 s)

    @app.task(name="boom", queue="seam", max_attempts=1)
    async def boom() -> None:
        raise RuntimeError("boom")

    async def main() -> tuple[list[int], list[int], list[Job | None]]:
        oks = await ok.enqueue_many_async([{"n": n} for n in range(20)])
        booms = [await boom.enqueue_async()]
        ids = [e.id for e in oks + booms]
        worker = Worker(app, concurrency=4, lease_seconds=0.9, poll_interval=0.1, listen=False)
        running = asyncio.create_task(worker.run())

        async def finished() -> bool:
            jobs = [await backend.get_job(i) for i in ids]
            return all(j is not None and j.status in ("done", "failed") for j in jobs)

        await wait_for_async(finished, 20)
        worker.stop()
        await asyncio.wait_for(running, 15)
        jobs = [await backend.get_job(i) for i in ids]
        await backend.close()
        await app.close_async()
        return [e.id for e in oks], [e.id for e in booms], jobs

    ok_ids, boom_ids, jobs = asyncio.run(main())
    app.close()
    assert sorted(backend.ids("enqueue")) == sorted(ok_ids + boom_ids)
    assert [j.status for j in jobs if j is not None] == ["done"] * 20 + ["failed"]
    # Every job was claimed through the backend once (its claimer's claims when it offers a
    # claimer, else its claim), and every outcome written through it.
    claimed_by, unused = ("claimer.claim", "claim")
    if wrapper is RecordingBackend:
        claimed_by, unused = unused, claimed_by
    assert sorted(backend.ids(claimed_by)) == sorted(ok_ids + boom_ids)
    assert not any(name == unused for name, _ in backend.calls)
    if wrapper is ClaimerRecordingBackend:  # the worker let go of its claimer as it stopped
        assert [name for name, _ in backend.calls].count("claimer.close") == 1
    assert sorted(backend.ids("complete")) == sorted(ok_ids)
    assert backend.ids("fail") == boom_ids
    assert ok_ids[0] in backend.ids("extend")  # the long job's heartbeats
    assert any(name == "reclaim_expired" for name, _ in backend.calls)  # the leader's upkeep


def test_a_batch_of_several_kinds_keeps_only_the_kinds_not_written(app: App) -> None:
    """The completer writes each kind of outcome with one call of the backend: when the
    failures' call fails, the completions written before it are reported owned, not written
    again (their claims would own their jobs no more, and they would count as lost)."""

    @app.task(name="t", queue="q")
    def t(n: int) -> None: ...

    t.enqueue_many([{"n": 1}, {"n": 2}])
    backend = RecordingBackend(PostgresBackend.on_client(app.async_client))
    recorded: list[Recorded] = []

    async def main() -> None:
        done, failed = await backend.claim(["q"], 2, "w", 30.0)
        backend.failing.add("fail")
        completer = Completer(app.async_client.store, backend, "keep", on_recorded=recorded.extend)
        completer.submit(done, DONE, 0.0)
        completer.submit(failed, Outcome("failed", error="no"), 0.0)
        assert not await completer.flush()  # the failures' call failed ...
        assert [(r.job.id, r.owned) for r in recorded] == [(done.id, True)]
        assert completer.pending == 1  # ... and only they wait to be written again
        assert await completer.flush()
        assert [(r.job.id, r.owned) for r in recorded] == [(done.id, True), (failed.id, True)]
        statuses = [getattr(await backend.get_job(j.id), "status", None) for j in (done, failed)]
        assert statuses == [JobStatus.DONE, JobStatus.FAILED]
        assert backend.ids("complete") == [done.id]  # written once
        assert backend.ids("fail") == [failed.id, failed.id]
        await app.close_async()

    asyncio.run(main())


def test_the_default_backends_claimer_is_the_tuned_claim(app: App) -> None:
    """With the default PostgresBackend, a worker claims through PostgreSQL's claimer: on the
    worker's pool, from the worker's claim cursor, with its queues' weights, on one connection
    kept from one claim to the next, and it gives that connection back as the worker stops."""

    @app.task(name="t", queue="a")
    async def t(n: int) -> None: ...

    @app.task(name="u", queue="b")
    async def u(n: int) -> None: ...

    async def main() -> None:
        worker = Worker(
            app, queues={"a": 3, "b": 1}, concurrency=2, poll_interval=0.05, listen=False
        )
        running = asyncio.create_task(worker.run())
        await wait_for_async(lambda: worker.slots is not None, 10)
        claimer = worker.slots.claims.claimer  # type: ignore[union-attr]
        assert isinstance(claimer, PostgresClaimer)
        assert claimer.settings.cursor is worker.claim_cursor
        assert claimer.settings.weights == {"a": 3, "b": 1}
        assert claimer.pool is worker._pool
        await t.enqueue_async(n=1)
        await wait_for_async(lambda: worker.stats.finished == 1, 10)
        kept = claimer.conn
        assert kept is not None
        await u.enqueue_async(n=2)
        await wait_for_async(lambda: worker.stats.finished == 2, 10)
        assert claimer.conn is kept  # the same connection, claim after claim
        worker.stop()
        await asyncio.wait_for(running, 15)
        assert claimer.conn is None  # given back to the pool
        await app.close_async()

    asyncio.run(main())
