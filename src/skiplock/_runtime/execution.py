"""Running one claimed job's task and turning what happened into an outcome.  No SQL here."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
import traceback
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Executor
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, Literal

from psycopg import AsyncConnection

from skiplock._db.payload import encode_result
from skiplock._runtime.cancel_flag import CancelFlag
from skiplock._runtime.progress import ProgressSlot
from skiplock._runtime.task_threads import TaskThreads, ThreadCall
from skiplock.errors import Fail, JobTimeout, Retry, UnknownTask
from skiplock.job import Job, UnrunnableJob
from skiplock.retry import ExponentialBackoff, RetryPolicy
from skiplock.serializer import ArgumentDecodeError
from skiplock.task import JobContext, JobHook, Task

MAX_ERROR_CHARS = 16_000
_UNKNOWN_TASK_RETRY = ExponentialBackoff()
NO_HOOKS: AbstractContextManager[object] = nullcontext()  # reusable: it holds no state


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended: ``done``; ``snooze`` (run again after ``delay`` without spending the
    attempt); ``retry`` (failed, next attempt after ``delay``); ``failed`` (failed for good);
    ``cancelled`` (an admin cancelled it while it ran); ``release`` (the worker shut down before
    it finished: back to pending, attempt unspent)."""

    kind: Literal["done", "snooze", "retry", "failed", "cancelled", "release"]
    delay: float = 0.0
    error: str | None = None
    timed_out: bool = False
    result: str | None = None  # done: what the task returned, as JSON (store_result=True)


DONE = Outcome("done")  # the outcome of almost every job: made once


def failure(
    job: Job,
    exc: BaseException,
    policy: RetryPolicy,
    secret: Collection[str] = (),
    give_up: str | None = None,
) -> Outcome:
    """The outcome of a failed attempt, with its error and traceback (secret payload values
    replaced by ``***``): retried while attempts are left, unless ``give_up`` says why not."""
    text = redact("".join(traceback.format_exception(exc)), job.payload, secret)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 2] + "\n[...]\n" + text[-MAX_ERROR_CHARS // 2 :]
    headline = redact(f"{type(exc).__name__}: {exc}", job.payload, secret)
    note = ""
    if give_up is not None:
        note = f"\n\nnot retried: {give_up} (attempt {job.attempts} of {job.max_attempts})"
    raised = exc.__traceback__ is not None or exc.__cause__ is not None
    error = headline + note + (f"\n\n{text}" if raised and text.strip() != headline else "")
    error = storable(error)
    if give_up is not None or job.attempts >= job.max_attempts:
        return Outcome("failed", error=error)
    return Outcome("retry", delay=max(0.0, policy.delay(job.attempts)), error=error)


def storable(text: str) -> str:
    """``text`` as a text column holds it: NUL characters (which PostgreSQL text refuses) and
    lone surrogates (which UTF-8 cannot encode) escaped.  An exception's message may hold
    either, and an error that cannot be written would lose the outcomes recorded with it."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def task_failure(job: Job, exc: BaseException, task: Task[Any, Any]) -> Outcome:
    """A failed attempt of ``task``: retried or not as the task's settings say."""
    settings = task.settings
    give_up = None
    if isinstance(exc, Fail):
        give_up = "the task raised Fail"
    elif isinstance(exc, settings.no_retry_on):
        give_up = f"{type(exc).__name__} is in the task's no_retry_on"
    elif not isinstance(exc, settings.retry_on):
        give_up = f"{type(exc).__name__} is not in the task's retry_on"
    return failure(job, exc, settings.retry, settings.secret, give_up)


def redact(text: str, payload: Any, secret: Collection[str]) -> str:
    """``text`` with the values of the payload's secret fields (3+ characters) replaced."""
    if not secret or not isinstance(payload, dict):
        return text
    for name in secret:
        value = payload.get(name)
        if value is None or isinstance(value, bool):
            continue
        # The value as it may appear in a message: raw, and escaped by repr() or json.dumps().
        if isinstance(value, str):
            forms = {
                value,
                repr(value)[1:-1],
                json.dumps(value)[1:-1],
                json.dumps(value, ensure_ascii=False)[1:-1],
            }
        else:
            forms = {str(value), json.dumps(value), repr(value)}
        for shown in sorted(forms, key=len, reverse=True):
            if len(shown) >= 3:
                text = text.replace(shown, "***")
    return text


def rolled_back(job: Job, task: Task[Any, Any] | None, exc: Exception) -> tuple[str, float]:
    """Error text and retry delay for a held-lock attempt whose transaction rolled back."""
    policy = task.settings.retry if task else _UNKNOWN_TASK_RETRY
    return storable(f"the held-lock transaction rolled back: {type(exc).__name__}: {exc}"), max(
        0.0, policy.delay(job.attempts)
    )


@dataclass(frozen=True)
class DeadStarts:
    """What a held-lock claim does after finding ``earlier`` starts of the same row state that
    died with their worker (see held_slots): they were attempts, so the job is given the next
    attempt number and runs now, or fails without running once they used up its attempts.  So
    a task that kills its process runs at most ``max_attempts`` times."""

    attempts: int  # the job's attempt count from now on
    error: str
    spent: bool  # fail the job now, without running it


def dead_starts(job: Job, earlier: int) -> DeadStarts:
    """``job`` as claimed (its attempts counted anew by the claim) after ``earlier`` dead
    starts: the claim's own attempt is the one after them."""
    made = job.attempts - 1 + earlier  # attempts that ran: recorded ones, then the dead ones
    error = (
        f"WorkerDied: the worker running attempt {made} of this held-lock job died before "
        f"recording its outcome ({earlier} dead in a row: a crash, an out-of-memory kill, a "
        "lost machine or connection)"
    )
    if made >= job.max_attempts:
        return DeadStarts(made, error, spent=True)
    return DeadStarts(made + 1, error, spent=False)


async def run_job(
    job: Job,
    task: Task[Any, Any] | None,
    *,
    worker_id: str,
    executor: Executor | TaskThreads,
    conn: AsyncConnection[Any] | None = None,
    unknown: UnknownTask | None = None,
    cancel_flag: Callable[[], threading.Event] | None = None,
    progress_slot: Callable[[], ProgressSlot] | None = None,
    ahead: ThreadCall | None = None,
    then: Callable[[], None] | None = None,
) -> Outcome:
    """Call the job's task within its timeout; exceptions and timeouts become outcomes,
    cancellation from outside propagates.  ``ahead``: the sync task's call, queued already
    (see :func:`start_ahead`), its timeout counted from when a thread took it.  ``then``: called
    once a sync task's call is queued for a thread (the slot may queue its next behind it)."""
    if task is None:  # no worker of this app can run it: retrying would not help
        assert unknown is not None
        give_up = "no task of that name is registered in this worker's app"
        return failure(job, unknown, _UNKNOWN_TASK_RETRY, give_up=give_up)
    # The flag reaches the task only through its context (ctx.cancelled).
    flag = None
    slot = None
    if task.settings.pass_context:
        flag = cancel_flag() if cancel_flag is not None else CancelFlag()
        slot = progress_slot() if progress_slot is not None else ProgressSlot()
    timeout = task.settings.timeout
    if timeout is None:
        return await _call(job, task, worker_id, executor, conn, flag, slot, ahead, then)
    try:
        if ahead is not None and ahead.kept:
            # Its timeout passed while its slot waited for the one before (the call was told
            # and kept then: see OutcomeReporter.start_ahead); a timeout, whenever it returns.
            raise TimeoutError
        left = timeout
        if ahead is not None and ahead.began is not None:
            left -= time.monotonic() - ahead.began  # it has run since: counted from then
        async with asyncio.timeout(left):
            return await _call(job, task, worker_id, executor, conn, flag, slot, ahead, then)
    except TimeoutError:
        if flag is not None:
            flag.set()  # a sync task cannot be interrupted: it is told instead
        return replace(task_failure(job, JobTimeout(timeout), task), timed_out=True)


async def _call(
    job: Job,
    task: Task[Any, Any],
    worker_id: str,
    executor: Executor | TaskThreads,
    conn: AsyncConnection[Any] | None,
    cancel_flag: threading.Event | None,
    progress_slot: ProgressSlot | None = None,
    ahead: ThreadCall | None = None,
    then: Callable[[], None] | None = None,
) -> Outcome:
    args: tuple[Any, ...] = ()
    if ahead is not None:  # built and queued by start_ahead: its arguments' count only
        args = () if cancel_flag is None else (None,)
    elif cancel_flag is not None:
        held_conn = conn if task.is_async else None
        slot = progress_slot or ProgressSlot()
        args = (JobContext(job, worker_id, held_conn, cancel_flag, slot),)
    try:
        if ahead is not None:
            assert isinstance(executor, TaskThreads)
            value = await wait_in_thread(executor, ahead, job.id, then)
            return _done(stored_result(value, task))
        if not isinstance(job.payload, dict):
            raise TypeError(f"payload of job {job.id} is not a JSON object")
        # The payload's JSON values as the parameters' types (the payload itself when the task
        # takes plain JSON).
        kwargs = task.decoding.decode(job.payload)
        if task.is_async:
            if conn is not None and cancel_flag is not None:
                # The task has the held-lock transaction (ctx.conn): a savepoint, so its writes
                # roll back if it fails while the job row stays locked.  A task without the
                # context cannot write there, and skips the savepoint's two round trips.
                async with conn.transaction():
                    with hooked(job, task):
                        value = await task.fn(*args, **kwargs)
                    # In the savepoint: a result that cannot be stored undoes the writes too.
                    result = stored_result(value, task)
            else:
                with hooked(job, task):
                    value = await task.fn(*args, **kwargs)
                result = stored_result(value, task)
        else:
            call = functools.partial(task.fn, *args, **kwargs)
            if task.app.job_hooks:
                call = functools.partial(_call_hooked, job, task, call)
            result = stored_result(await in_thread(executor, call, job.id, then), task)
    except Retry as request:
        return Outcome("snooze", delay=request.delay)
    except ArgumentDecodeError as exc:
        # The same row would fail the same way: failed at once, this job alone.
        settings = task.settings
        give_up = f"its payload does not decode into the parameters of task {task.name!r}"
        return failure(job, exc, settings.retry, settings.secret, give_up)
    except Exception as exc:
        if isinstance(exc, TypeError):  # perhaps the call itself: arguments that do not bind
            mismatch = arguments_mismatch(task, args, job.payload)
            if mismatch is not None:
                settings = task.settings
                give_up = f"the payload does not match the parameters of task {task.name!r}"
                return failure(job, exc, settings.retry, settings.secret, f"{give_up} ({mismatch})")
        return task_failure(job, exc, task)
    except (SystemExit, KeyboardInterrupt) as exc:
        # Raised by the task's own code (the worker's signals stop it by other means): a
        # failure of this job, not the end of the worker and of every job it runs.
        return task_failure(job, exc, task)
    return _done(result)


def _done(result: str | None) -> Outcome:
    return DONE if result is None else Outcome("done", result=result)


def start_ahead(
    job: Job,
    task: Task[Any, Any],
    *,
    worker_id: str,
    executor: TaskThreads,
    cancel_flag: Callable[[], threading.Event],
    progress_slot: Callable[[], ProgressSlot],
) -> ThreadCall | None:
    """Queue a sync task's call for the task threads before its slot waits for it (behind the
    call the slot waits for now: see LeasedSlots); :func:`run_job` with ``ahead`` waits for it.
    None when the job is to run the ordinary way: an async task, or a payload that does not
    decode (it fails there, as it would have)."""
    if task.is_async or not isinstance(job.payload, dict):
        return None
    args: tuple[Any, ...] = ()
    if task.settings.pass_context:
        args = (JobContext(job, worker_id, None, cancel_flag(), progress_slot()),)
    try:
        kwargs = task.decoding.decode(job.payload)
    except Exception:
        return None
    call = functools.partial(task.fn, *args, **kwargs)
    if task.app.job_hooks:
        call = functools.partial(_call_hooked, job, task, call)
    return executor.start(call)


def arguments_mismatch(task: Task[Any, Any], args: tuple[Any, ...], payload: Any) -> str | None:
    """Why the task's function cannot be called with ``args`` and the payload as keyword
    arguments (None: it can).  Asked only after a TypeError: one raised inside the task is an
    ordinary failure, retried."""
    if not isinstance(payload, dict):
        return "the payload is not a JSON object"
    try:
        task.call_signature.bind(*args, **payload)
    except TypeError as exc:
        return str(exc)
    return None


def unrunnable(job: UnrunnableJob) -> Outcome:
    """The outcome of a claimed row its worker cannot run (see UnrunnableJob): failed at once,
    final, not run; retrying it would meet the same row."""
    note = "not run, not retried: fix the row and retry the job, or enqueue it again"
    return Outcome("failed", error=f"{job.reason}\n\n{note}")


async def in_thread(
    executor: Executor | TaskThreads,
    call: Callable[[], Any],
    job_id: int,
    then: Callable[[], None] | None = None,
) -> Any:
    """Run a sync task's call in a task thread and wait for it.  If the wait is cancelled (the
    job timed out, or was stopped) while the call runs, the call keeps its thread, and the
    worker's threads put another in its place (:meth:`TaskThreads.keep`); a call not yet
    started never runs.  ``then``: called once the call is queued."""
    if isinstance(executor, TaskThreads):
        return await wait_in_thread(executor, executor.start(call), job_id, then)
    return await asyncio.wrap_future(executor.submit(call))


async def wait_in_thread(
    executor: TaskThreads, started: ThreadCall, job_id: int, then: Callable[[], None] | None
) -> Any:
    """Wait for a call queued for the task threads (see :func:`in_thread`)."""
    assert started.waiter is not None
    try:
        if then is not None:
            then()
        return await started.waiter
    except asyncio.CancelledError:
        executor.keep(started, job_id)
        raise


def hooked(job: Job, task: Task[Any, Any]) -> AbstractContextManager[object]:
    """The app's job hooks (:meth:`App.around_job`) around one call of ``task``, the first
    registered outermost."""
    hooks = task.app.job_hooks
    if not hooks:
        return NO_HOOKS
    if len(hooks) == 1:
        return hooks[0](job)
    return _nested(hooks, job)


@contextmanager
def _nested(hooks: list[JobHook], job: Job) -> Iterator[None]:
    with ExitStack() as stack:
        for hook in hooks:
            stack.enter_context(hook(job))
        yield


def _call_hooked(job: Job, task: Task[Any, Any], call: Callable[[], Any]) -> Any:
    """A sync task's call inside the hooks, in the task's thread."""
    with hooked(job, task):
        return call()


def stored_result(value: Any, task: Task[Any, Any]) -> str | None:
    """What the task returned, as JSON to store, if it stores results (None: nothing to store);
    :class:`InvalidPayload` when it cannot be stored."""
    if value is None or not task.settings.store_result:
        return None
    return encode_result(
        value, max_bytes=task.app.max_payload_bytes, task=task.name, default=task.encode_default
    )
