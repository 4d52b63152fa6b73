"""Job timeouts and cancellation with real Workers on a real server.

Async tasks are cancelled (at their timeout, or when an admin cancels the running job); sync
tasks cannot be interrupted, so they see ``ctx.cancelled`` set and are expected to return.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from helpers.polling import comes_true, comes_true_async, wait_for_async
from skiplock import App, FixedDelay, JobContext, JobStatus, Worker

pytestmark = pytest.mark.smoke


def job_row(db: Any, app: App, job_id: int) -> tuple[Any, ...]:
    return db.execute(
        f'SELECT status, attempts, last_error, finished_at FROM "{app.schema}".jobs WHERE id = %s',
        (job_id,),
    ).fetchone()


def status_is(app: App, job_id: int, status: JobStatus) -> Callable[[], bool]:
    def check() -> bool:
        job = app.get_job(job_id)
        return job is not None and job.status == status

    return check


# -- timeouts --------------------------------------------------------------------------------


def test_async_task_past_its_timeout_is_cancelled_failed_and_retried(app: App, db: Any) -> None:
    cancelled: list[int] = []

    @app.task(name="sleepy", timeout=0.3, max_attempts=2, retry=FixedDelay(0), pass_context=True)
    async def sleepy(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(ctx.job.attempts)
            raise

    job_id = sleepy.enqueue().id
    worker = Worker(app, burst=True, poll_interval=0.05)
    started = time.monotonic()
    stats = asyncio.run(asyncio.wait_for(worker.run(), 30))
    elapsed = time.monotonic() - started

    status, attempts, error, finished_at = job_row(db, app, job_id)
    assert (status, attempts) == ("failed", 2)
    assert finished_at is not None
    assert "timeout" in error and "JobTimeout" in error, error
    assert cancelled == [1, 2], "the task was not cancelled at its timeout"
    assert (stats.timed_out, stats.retried, stats.failed, stats.done) == (2, 1, 1, 0)
    assert 0.6 <= elapsed < 4.0, f"two 0.3 s attempts of a 5 s task took {elapsed:.2f}s"


def test_sync_task_past_its_timeout_sees_the_flag_and_returns(app: App, db: Any) -> None:
    returned: list[tuple[int, float]] = []

    @app.task(name="grind", timeout=0.3, max_attempts=2, retry=FixedDelay(0), pass_context=True)
    def grind(ctx: JobContext) -> None:
        began = time.monotonic()
        while not ctx.cancelled.wait(0.01):
            if time.monotonic() - began > 10:
                break
        returned.append((ctx.job.attempts, time.monotonic() - began))

    job_id = grind.enqueue().id
    stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    comes_true(lambda: len(returned) >= 2, 5, step=0.01)  # the assertions below tell

    status, attempts, error, _ = job_row(db, app, job_id)
    assert (status, attempts) == ("failed", 2)
    assert "ran longer than its timeout" in error, error
    assert [a for a, _ in returned] == [1, 2]
    for _, ran in returned:
        assert 0.25 <= ran < 2.0, f"flagged task returned after {ran:.2f}s"
    assert (stats.timed_out, stats.retried, stats.failed) == (2, 1, 1)


def test_a_task_within_its_timeout_is_unaffected(app: App, db: Any) -> None:
    @app.task(name="brisk", timeout=2.0)
    async def brisk() -> None:
        await asyncio.sleep(0.05)

    job_id = brisk.enqueue().id
    stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    assert job_row(db, app, job_id)[:2] == ("done", 1)
    assert (stats.done, stats.timed_out) == (1, 0)


def test_held_async_task_past_its_timeout_rolls_back_its_writes_and_retries(
    app: App, db: Any
) -> None:
    db.execute(f'CREATE TABLE "{app.schema}".side (n int)')

    @app.task(
        name="held_slow",
        model="held",
        timeout=0.3,
        max_attempts=2,
        retry=FixedDelay(0),
        pass_context=True,
    )
    async def held_slow(ctx: JobContext) -> None:
        assert ctx.conn is not None
        await ctx.conn.execute(f'INSERT INTO "{app.schema}".side VALUES (1)')
        await asyncio.sleep(5)

    job_id = held_slow.enqueue().id
    stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    status, attempts, error, _ = job_row(db, app, job_id)
    assert (status, attempts) == ("failed", 2)
    assert "timeout" in error
    assert stats.timed_out == 2
    assert db.execute(f'SELECT count(*) FROM "{app.schema}".side').fetchone() == (0,)


# -- cancellation ----------------------------------------------------------------------------


def lease_worker(app: App) -> Worker:
    return Worker(app, lease_seconds=0.6, poll_interval=0.05)  # heartbeat every 0.2 s


def test_cancel_a_running_async_job(app: App, db: Any) -> None:
    started = threading.Event()
    saw_cancel: list[int] = []

    @app.task(name="long", pass_context=True)
    async def long(ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            saw_cancel.append(ctx.job.id)
            raise

    job_id = long.enqueue().id
    worker = lease_worker(app)

    async def main() -> float:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(started.is_set, 5.0, "the job never started")
            assert app.sync_client.cancel_or_request(job_id) == "requested"
            asked = time.monotonic()
            await wait_for_async(status_is(app, job_id, JobStatus.CANCELLED), 3.0)
            return time.monotonic() - asked
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    took = asyncio.run(main())
    status, attempts, error, finished_at = job_row(db, app, job_id)
    assert (status, attempts) == ("cancelled", 1)
    assert finished_at is not None and "cancel" in error
    assert saw_cancel == [job_id]
    assert took < 1.5, f"cancelled {took:.2f}s after the request (heartbeat every 0.2 s)"
    assert (worker.stats.cancelled, worker.stats.done, worker.stats.failed) == (1, 0, 0)
    assert worker.stats.released == 0


def test_cancel_a_running_sync_job_sets_its_flag(app: App, db: Any) -> None:
    started = threading.Event()
    returned: list[bool] = []

    @app.task(name="loop", pass_context=True)
    def loop(ctx: JobContext) -> None:
        started.set()
        flagged = ctx.cancelled.wait(30)
        returned.append(flagged)

    job_id = loop.enqueue().id
    worker = lease_worker(app)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(started.is_set, 5.0, "the job never started")
            assert app.sync_client.cancel_or_request(job_id) == "requested"
            await wait_for_async(status_is(app, job_id, JobStatus.CANCELLED), 3.0)
            await wait_for_async(lambda: bool(returned), 1.0, "the sync task kept running")
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    assert returned == [True]
    status, _, _, finished_at = job_row(db, app, job_id)
    assert status == "cancelled" and finished_at is not None
    assert worker.stats.cancelled == 1


def test_cancel_a_pending_job_and_it_never_runs(app: App, db: Any) -> None:
    ran: list[int] = []

    @app.task(name="never")
    def never() -> None:
        ran.append(1)

    job_id = never.enqueue().id
    assert app.sync_client.cancel_or_request(job_id) == "cancelled"
    stats = asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    status, attempts, _, finished_at = job_row(db, app, job_id)
    assert (status, attempts) == ("cancelled", 0) and finished_at is not None
    assert ran == [] and stats.claimed == 0
    # A scheduled job is cancelled before it starts too.
    later = never.with_options(delay=3600).enqueue().id
    assert app.sync_client.cancel_or_request(later) == "cancelled"
    assert job_row(db, app, later)[0] == "cancelled"
    # Cancelling it again, a done job, or a job that does not exist changes nothing.
    assert app.sync_client.cancel_or_request(job_id) == "unchanged"
    assert app.sync_client.cancel_or_request(10**12) == "unchanged"


def test_cancel_of_a_done_job_is_unchanged(app: App, db: Any) -> None:
    @app.task(name="quick")
    def quick() -> None: ...

    job_id = quick.enqueue().id
    asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))
    assert job_row(db, app, job_id)[0] == "done"
    assert app.sync_client.cancel_or_request(job_id) == "unchanged"
    assert job_row(db, app, job_id)[0] == "done"


def test_a_cancelled_then_retried_job_runs_to_completion(app: App, db: Any) -> None:
    """retry_job gives a cancelled job another attempt: the earlier cancel request is spent
    and must not cancel the new attempt too."""
    attempts_started: list[int] = []

    @app.task(name="redo", pass_context=True)
    async def redo(ctx: JobContext) -> None:
        attempts_started.append(ctx.job.attempts)
        # The first attempt waits to be cancelled; the retry does a little real work,
        # long enough for a few heartbeats.
        await asyncio.sleep(30 if ctx.job.attempts == 1 else 0.8)

    job_id = redo.enqueue().id
    worker = lease_worker(app)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: attempts_started == [1], 5.0)
            assert app.sync_client.cancel_or_request(job_id) == "requested"
            await wait_for_async(status_is(app, job_id, JobStatus.CANCELLED), 3.0)
            assert app.retry_job(job_id)
            await wait_for_async(lambda: len(attempts_started) == 2, 3.0)
            await comes_true_async(
                lambda: job_row(db, app, job_id)[0] in ("done", "cancelled"), 5.0
            )
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    status, attempts, error, _ = job_row(db, app, job_id)
    assert (status, attempts) == ("done", 2), f"retried attempt ended {status}: {error}"
    assert worker.stats.cancelled == 1 and worker.stats.done == 1


def test_cancel_of_a_running_held_job_answers_without_waiting_for_the_job(
    app: App, db: Any
) -> None:
    """A held-lock job's row stays locked (and looks 'pending' to others) until its transaction
    ends; an admin's cancel must answer at once, not block for as long as the job runs."""
    started = threading.Event()

    @app.task(name="held", model="held")
    async def held() -> None:
        started.set()
        await asyncio.sleep(3)

    job_id = held.enqueue().id
    worker = Worker(app, poll_interval=0.05, shutdown_grace=0.1)  # then roll the job back

    async def main() -> tuple[str, float]:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(started.is_set, 5.0, "the job never started")
            asked = time.monotonic()
            answer = await asyncio.to_thread(app.sync_client.cancel_or_request, job_id)
            return answer, time.monotonic() - asked
        finally:
            worker.stop()
            await asyncio.wait_for(task, 10)

    answer, took = asyncio.run(main())
    assert took < 1.0, f"cancel_or_request blocked {took:.2f}s on the running job (-> {answer})"
    assert answer == "held"  # its worker is asked by NOTIFY: the caller is told so, at once


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_an_admin_cancels_a_running_held_job_and_its_writes_roll_back(
    app: App, db: Any, kind: str
) -> None:
    """A held-lock job's row cannot take the flag a leased job's heartbeat reads (its
    transaction has it locked): the admin's cancel asks its worker through NOTIFY.  The job ends
    cancelled in its own transaction, so what the task wrote on ``ctx.conn`` rolls back; an
    async task is cancelled where it awaits, a sync one sees ``ctx.cancelled``."""
    side = f'"{app.schema}".side_effects'
    db.execute(f"CREATE TABLE {side} (n int)")
    started = threading.Event()
    seen: list[str] = []

    if kind == "async":

        @app.task(name="held_long", model="held", pass_context=True)
        async def held_long(ctx: JobContext) -> None:
            assert ctx.conn is not None
            await ctx.conn.execute(f"INSERT INTO {side} VALUES (1)")
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

    else:

        @app.task(name="held_long", model="held", pass_context=True)
        def held_long(ctx: JobContext) -> None:
            started.set()
            if ctx.cancelled.wait(30):
                seen.append("told")

    job_id = app.enqueue("held_long").id
    worker = Worker(app, poll_interval=0.05)

    async def main() -> str:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(started.is_set, 5.0, "the job never started")
            assert worker.listener is not None
            await wait_for_async(worker.listener.listening.is_set, 5.0)
            answer = await asyncio.to_thread(app.sync_client.cancel_or_request, job_id)
            await wait_for_async(lambda: worker.stats.cancelled == 1, 5.0, lambda: worker.stats)
            return answer
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)

    answer = asyncio.run(main())
    assert answer == "held"
    assert seen == (["cancelled"] if kind == "async" else ["told"])
    status, attempts, error, finished_at = job_row(db, app, job_id)
    assert (status, attempts, error) == ("cancelled", 1, "cancelled while running")
    assert finished_at is not None
    assert db.execute(f"SELECT count(*) FROM {side}").fetchone() == (0,)
    assert (worker.stats.cancelled, worker.stats.lost, worker.stats.done) == (1, 0, 0)


def test_a_cancel_request_that_comes_while_a_held_job_commits_does_not_undo_it(app: App) -> None:
    """The job has finished and its worker is writing its outcome when the admin's request
    arrives: the outcome commits (cutting the commit short would roll the job back, to run
    again)."""
    runs: list[int] = []

    @app.task(name="quick", model="held")
    async def quick() -> None:
        runs.append(1)

    job_id = quick.enqueue().id
    worker = Worker(app, poll_interval=0.05)
    write = worker.store.job_finish_many

    async def cancel_then_write(*args: Any) -> Any:
        worker.state.cancel_requested(job_id)  # as the listener would, on the admin's NOTIFY
        await asyncio.sleep(0)  # where a cancellation of the writing task would land
        return await write(*args)

    worker.store.job_finish_many = cancel_then_write  # type: ignore[method-assign]

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: worker.stats.done == 1, 5.0, lambda: worker.stats)
            await asyncio.sleep(0.3)  # time for a second run, were the job rolled back
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)

    asyncio.run(main())
    assert runs == [1]
    job = app.get_job(job_id)
    assert job is not None and (job.status, job.attempts) == (JobStatus.DONE, 1)


def test_a_sync_task_past_its_timeout_does_not_hold_up_the_next_sync_job(app: App, db: Any) -> None:
    """A sync task past its timeout cannot be interrupted: its attempt fails and the call runs
    on in its thread.  Another thread takes that one's place, so the next sync job of a worker
    with one slot starts at once, not when the stuck call returns."""
    release = threading.Event()
    ran: list[str] = []

    @app.task(name="stuck", timeout=0.2, max_attempts=1)
    def stuck() -> None:
        release.wait(20)
        ran.append("stuck returned")

    @app.task(name="quick")
    def quick() -> None:
        ran.append("quick")

    stuck_id = stuck.with_options(priority=0).enqueue().id
    quick_id = quick.with_options(priority=1).enqueue().id
    worker = Worker(app, concurrency=1, poll_interval=0.05)

    async def main() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await wait_for_async(lambda: worker.stats.done == 1, 5.0, lambda: (worker.stats, ran))
        finally:
            release.set()
            worker.stop()
            await asyncio.wait_for(task, 15)

    asyncio.run(main())
    assert ran[0] == "quick", ran
    assert job_row(db, app, stuck_id)[:2] == ("failed", 1)
    assert job_row(db, app, quick_id)[:2] == ("done", 1)
    assert (worker.stats.timed_out, worker.stats.done) == (1, 1)
