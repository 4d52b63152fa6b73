"""Tasks: the functions workers run, and the handles that enqueue them."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, cast

from psycopg import AsyncConnection

from skiplock._db.caller_connection import AsyncCallerConnection, CallerConnection
from skiplock._db.enqueue import EnqueueOptions
from skiplock._runtime.cancel_flag import CancelFlag
from skiplock._runtime.progress import ProgressSlot, checked_progress
from skiplock._task_arguments import ArgumentCheck, uncallable
from skiplock._task_settings import TaskSettings
from skiplock.errors import ConfigurationError
from skiplock.job import Enqueued, Job
from skiplock.serializer import Arguments, PlainJSON, Serializer

if TYPE_CHECKING:
    from skiplock._db.client_async import AsyncClient
    from skiplock._db.client_sync import SyncClient
    from skiplock._db.enqueue import NewJobs

P = ParamSpec("P")
R = TypeVar("R")

RESERVED_ARGUMENTS = frozenset({"conn"})
# Given the job a worker is about to run, a context manager to run its task in (App.around_job).
JobHook = Callable[[Job], AbstractContextManager[object]]
# An App.around_enqueue hook: (task name, queue, number of jobs) -> a context manager.
EnqueueHook = Callable[[str, str, int], AbstractContextManager[object]]


class TaskApp(Protocol):
    """What a task uses of the :class:`~skiplock.App` it is registered with: its settings,
    its job hooks, its validation of new jobs and its clients.  A protocol, so that this module
    does not import the app's, which imports it."""

    @property
    def default_queue(self) -> str: ...
    @property
    def max_payload_bytes(self) -> int: ...
    @property
    def serializer(self) -> Serializer: ...
    @property
    def completion(self) -> str: ...
    @property
    def job_hooks(self) -> list[JobHook]: ...
    @property
    def sync_client(self) -> SyncClient: ...
    @property
    def async_client(self) -> AsyncClient: ...
    def build_jobs(
        self, task_name: str, payloads: Iterable[Mapping[str, Any]], options: EnqueueOptions
    ) -> NewJobs: ...
    def insert_jobs(
        self,
        task_name: str,
        payloads: Iterable[Mapping[str, Any]],
        options: EnqueueOptions,
        conn: CallerConnection | None,
    ) -> list[Enqueued]: ...
    async def insert_jobs_async(
        self,
        task_name: str,
        payloads: Iterable[Mapping[str, Any]],
        options: EnqueueOptions,
        conn: AsyncCallerConnection | None,
    ) -> list[Enqueued]: ...


@dataclass(frozen=True)
class JobContext:
    """What a task declared with ``pass_context=True`` gets as its first argument.

    ``conn`` is set for held-lock jobs of async tasks: the transaction that holds the job's row
    lock and will mark it done.  Writes made on it commit atomically with the job's completion,
    or roll back with its failure.  ``cancelled`` is set when the job is cancelled, times out,
    is stopped at shutdown, or its claim is gone (its lease was reclaimed, or its held-lock
    session ended: it runs elsewhere now): a sync task, which cannot be interrupted, should
    check it in long loops and return.
    """

    job: Job
    worker_id: str
    conn: AsyncConnection[Any] | None = None
    cancelled: threading.Event = field(default_factory=CancelFlag)
    _progress: ProgressSlot = field(default_factory=ProgressSlot, repr=False)

    def progress(self, fraction: float, status: str | None = None) -> None:
        """Report how far the job is, ``fraction`` from 0 to 1, with an optional short
        ``status`` (at most 200 characters), e.g. ``ctx.progress(0.4, "page 4 of 10")``.

        Costs no I/O: the worker writes the last report of each job at most once a second
        (a report made just before the job ends may not be written: its outcome supersedes
        it).  Shown while the job runs by ``skiplock jobs show``, the dashboard and its API.
        Raises ValueError for a fraction outside 0..1 or a longer status."""
        self._progress.set(*checked_progress(fraction, status))


class Task(Generic[P, R]):
    """A registered task.  Calling it runs the function directly; ``enqueue`` makes a job.

    ``enqueue`` takes the function's own arguments (typed from its signature, checked at once
    against it) and ``conn``; :meth:`with_options` the other options of the enqueue."""

    def __init__(self, app: TaskApp, fn: Callable[..., R], settings: TaskSettings) -> None:
        self.app = app
        self.fn = fn
        self.settings = settings
        self.is_async: bool = inspect.iscoroutinefunction(fn)
        clash = RESERVED_ARGUMENTS & set(inspect.signature(fn).parameters)
        if clash:
            raise ValueError(
                f"task {settings.name!r} has a parameter named {sorted(clash)[0]!r}, which "
                "enqueue() reserves for the caller's connection; rename it"
            )
        self.arguments: ArgumentCheck = ArgumentCheck(settings.name, fn, settings.pass_context)
        self.serializer: Serializer = settings.serializer or app.serializer
        # What the JSON encoder calls for a value it cannot write (None: plain JSON only).
        self.encode_default: Callable[[Any], Any] | None = (
            None if isinstance(self.serializer, PlainJSON) else self.serializer.encode
        )
        # The decoders of the task's parameters and result, made when first needed.
        self.decoding: Arguments = Arguments(
            fn, self.serializer, pass_context=settings.pass_context
        )
        if self.arguments.impossible:
            raise ConfigurationError(
                uncallable(settings.name, self.arguments.signature, settings.pass_context)
            )

    @property
    def name(self) -> str:
        return self.settings.name

    @functools.cached_property
    def call_signature(self) -> inspect.Signature:
        """The signature of what the worker calls: ``fn`` itself, not a function it wraps (a
        decorator's wrapper takes the arguments).  Made the first time a call fails."""
        return inspect.signature(self.fn, follow_wrapped=False)

    @property
    def queue(self) -> str:
        assert self.settings.options.queue is not None
        return self.settings.options.queue

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    def decode_result(self, value: Any) -> R:
        """A stored result (``Job.result``, JSON) as the type the task's return annotation
        names, decoded by the task's serializer: ``task.decode_result(job.result)``."""
        decoder = self.decoding.result_decoder
        return cast(R, value if decoder is None or value is None else decoder(value))

    def with_options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        entity_key: str | None = None,
        idempotency_key: str | None = None,
        meta: Mapping[str, Any] | None = None,
        depends_on: Sequence[int | Enqueued] | None = None,
        expires: float | timedelta | datetime | None = None,
        fair_key: str | None = None,
        limit_key: str | None = None,
    ) -> TaskCall[P]:
        """A handle that enqueues this task with these options instead of the task's defaults.
        ``meta`` (a small JSON object) travels with the job without being passed to the task:
        ``job.meta`` in :meth:`App.around_job` hooks and ``ctx.job.meta``.  ``depends_on``
        (jobs, or their ids): the job waits until every one of them is done, and is cancelled
        if one fails or is cancelled.  ``expires`` (seconds after the enqueue, a timedelta or a
        time): a job not started by then is never run, it ends ``cancelled``.  ``fair_key`` (a
        tenant, a customer): jobs with the same key share their queue's throughput equally with
        the jobs of other keys, instead of waiting behind an older backlog.  ``limit_key`` (a
        tenant, an API token): the job counts in the limits set on that key's value
        (``client.set_key_limit``), with every other job of the key, whatever its task or
        queue."""
        options = EnqueueOptions(
            queue,
            priority,
            run_at,
            delay,
            max_attempts,
            entity_key,
            idempotency_key,
            meta,
            depends_on,
            expires,
            fair_key,
            limit_key,
        )
        return TaskCall(self, self.settings.options.merged(options))

    def _call(self) -> TaskCall[P]:
        return TaskCall(self, self.settings.options)

    # A ParamSpec admits no keyword-only parameter beside it: ``conn`` comes before the task's
    # own arguments, by name or first by position, and run time takes what type checkers
    # accept (arguments by position are stored under their parameters' names).
    if TYPE_CHECKING:

        def enqueue(
            self, conn: CallerConnection | None = None, *args: P.args, **payload: P.kwargs
        ) -> Enqueued: ...

        async def enqueue_async(
            self, conn: AsyncCallerConnection | None = None, *args: P.args, **payload: P.kwargs
        ) -> Enqueued: ...

    else:

        def enqueue(self, conn=None, *args, **payload):
            """Enqueue one job; with ``conn``, inside that connection's current transaction."""
            return self._call().enqueue(conn, *args, **payload)

        async def enqueue_async(self, conn=None, *args, **payload):
            return await self._call().enqueue_async(conn, *args, **payload)

    def enqueue_many(
        self, payloads: Iterable[Mapping[str, Any]], *, conn: CallerConnection | None = None
    ) -> list[Enqueued]:
        """Enqueue one job per payload in a single statement."""
        return self._call().enqueue_many(payloads, conn=conn)

    async def enqueue_many_async(
        self,
        payloads: Iterable[Mapping[str, Any]],
        *,
        conn: AsyncCallerConnection | None = None,
    ) -> list[Enqueued]:
        return await self._call().enqueue_many_async(payloads, conn=conn)


class ContextTask(Task[P, R]):
    """A task declared with ``pass_context=True``: its function takes the :class:`JobContext`
    first, which the worker passes; ``enqueue`` takes the other arguments."""

    def __call__(  # type: ignore[override]  # the context comes first
        self, ctx: JobContext, /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        return self.fn(ctx, *args, **kwargs)


@dataclass(frozen=True)
class TaskCall(Generic[P]):
    """A task with enqueue options bound (see :meth:`Task.with_options`)."""

    task: Task[P, Any]
    options: EnqueueOptions

    def with_options(self, **options: Any) -> TaskCall[P]:
        return replace(self, options=self.options.merged(EnqueueOptions(**options)))

    if TYPE_CHECKING:

        def enqueue(
            self, conn: CallerConnection | None = None, *args: P.args, **payload: P.kwargs
        ) -> Enqueued: ...

        async def enqueue_async(
            self, conn: AsyncCallerConnection | None = None, *args: P.args, **payload: P.kwargs
        ) -> Enqueued: ...

    else:

        def enqueue(self, conn=None, *args, **payload):
            payload = self.task.arguments.named(conn, args, payload)
            return self.enqueue_many([payload], conn=conn)[0]

        async def enqueue_async(self, conn=None, *args, **payload):
            payload = self.task.arguments.named(conn, args, payload)
            return (await self.enqueue_many_async([payload], conn=conn))[0]

    def enqueue_many(
        self, payloads: Iterable[Mapping[str, Any]], *, conn: CallerConnection | None = None
    ) -> list[Enqueued]:
        return self.task.app.insert_jobs(self.task.name, payloads, self.options, conn)

    async def enqueue_many_async(
        self,
        payloads: Iterable[Mapping[str, Any]],
        *,
        conn: AsyncCallerConnection | None = None,
    ) -> list[Enqueued]:
        return await self.task.app.insert_jobs_async(self.task.name, payloads, self.options, conn)
