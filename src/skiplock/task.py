"""Tasks: the functions workers run, and the handles that enqueue them."""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, Protocol, TypeVar, cast

from psycopg import AsyncConnection

from skiplock._db.bounds import check_queue_name
from skiplock._db.caller_connection import AsyncCallerConnection, CallerConnection
from skiplock._db.enqueue import EnqueueOptions, build_job
from skiplock._runtime.progress import ProgressSlot, checked_progress
from skiplock.errors import ConfigurationError, InvalidArguments
from skiplock.job import Enqueued, Job
from skiplock.retry import ExponentialBackoff, RetryPolicy
from skiplock.serializer import Arguments, PlainJSON, Serializer

if TYPE_CHECKING:
    from skiplock._db.client_async import AsyncClient
    from skiplock._db.client_sync import SyncClient
    from skiplock._db.enqueue import NewJobs

P = ParamSpec("P")
R = TypeVar("R")

WorkerModel = Literal["lease", "held"]
RESERVED_ARGUMENTS = frozenset({"conn"})
ExceptionTypes = type[BaseException] | Iterable[type[BaseException]]
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
    cancelled: threading.Event = field(default_factory=threading.Event)
    _progress: ProgressSlot = field(default_factory=ProgressSlot, repr=False)

    def progress(self, fraction: float, status: str | None = None) -> None:
        """Report how far the job is, ``fraction`` from 0 to 1, with an optional short
        ``status`` (at most 200 characters), e.g. ``ctx.progress(0.4, "page 4 of 10")``.

        Costs no I/O: the worker writes the last report of each job at most once a second
        (a report made just before the job ends may not be written: its outcome supersedes
        it).  Shown while the job runs by ``skiplock jobs show``, the dashboard and its API.
        Raises ValueError for a fraction outside 0..1 or a longer status."""
        self._progress.set(*checked_progress(fraction, status))


@dataclass(frozen=True)
class TaskSettings:
    name: str
    options: EnqueueOptions
    retry: RetryPolicy
    model: WorkerModel | None
    pass_context: bool
    timeout: float | None = None
    secret: frozenset[str] = frozenset()
    store_result: bool = False
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    no_retry_on: tuple[type[BaseException], ...] = ()
    serializer: Serializer | None = None  # None: the app's


def exception_types(value: ExceptionTypes, option: str) -> tuple[type[BaseException], ...]:
    """An exception class or an iterable of them, as a tuple for ``isinstance``."""
    found: tuple[object, ...]
    if isinstance(value, (type, str)):
        found = (value,)
    else:
        try:
            found = tuple(value)
        except TypeError:
            found = (value,)
    for cls in found:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise ConfigurationError(
                f"{option} takes exception classes (one, or a tuple of them), got {cls!r}"
            )
    return cast(tuple[type[BaseException], ...], found)


def checked_settings(
    app: TaskApp,
    name: str,
    *,
    queue: str | None,
    priority: int,
    max_attempts: int,
    retry: RetryPolicy | None,
    model: WorkerModel | None,
    pass_context: bool,
    timeout: float | None,
    secret: Iterable[str],
    store_result: bool,
    retry_on: ExceptionTypes,
    no_retry_on: ExceptionTypes,
    serializer: Serializer | None = None,
) -> TaskSettings:
    """The settings of a task registered with :meth:`App.task`, each option checked."""
    if model not in (None, "lease", "held"):
        raise ConfigurationError(f"model must be 'lease' or 'held', got {model!r}")
    checked_serializer(serializer)
    options = EnqueueOptions(
        queue=check_queue_name(queue or app.default_queue),
        priority=priority,
        max_attempts=max_attempts,
    )
    build_job(name, {}, options, max_payload_bytes=app.max_payload_bytes)
    if timeout is not None and not timeout > 0:
        raise ConfigurationError(f"timeout must be > 0 seconds, got {timeout!r}")
    if isinstance(secret, str):
        raise ConfigurationError("secret must be a list of field names, not a string")
    if store_result and app.completion == "delete":
        raise ConfigurationError(
            f"task {name!r} stores its result, but this app deletes done jobs "
            "(completion='delete'): keep them (completion='keep' or 'archive')"
        )
    return TaskSettings(
        name,
        options,
        retry or ExponentialBackoff(),
        model,
        pass_context,
        timeout,
        frozenset(secret),
        store_result,
        exception_types(retry_on, "retry_on"),
        exception_types(no_retry_on, "no_retry_on"),
        serializer,
    )


def checked_serializer(serializer: Serializer | None) -> Serializer | None:
    """``serializer`` if it has what a :class:`~skiplock.serializer.Serializer` has."""
    if isinstance(serializer, type):
        raise ConfigurationError(
            f"serializer takes an instance, not the class: {serializer.__name__}()"
        )
    if serializer is not None and not isinstance(serializer, Serializer):
        raise ConfigurationError(
            f"serializer must have encode(value) and decoder(annotation) methods (see "
            f"skiplock.serializer.Serializer), got {serializer!r}"
        )
    return serializer


class ArgumentCheck:
    """Whether a payload binds to a task function's parameters the way the worker calls it:
    ``fn(**payload)``, or ``fn(ctx, **payload)`` for a task that takes its context."""

    def __init__(self, name: str, fn: Callable[..., Any], pass_context: bool) -> None:
        self.name = name
        self.signature: inspect.Signature = inspect.signature(fn)
        self.context_args: tuple[Any, ...] = (None,) if pass_context else ()
        params = list(self.signature.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        # Sets for a quick yes on each enqueue; a no is confirmed (and worded) by bind().
        self.impossible: bool = False
        if pass_context and positional:
            params.remove(positional[0])
        elif pass_context and not any(p.kind == p.VAR_POSITIONAL for p in params):
            self.impossible = True  # no parameter for the context
        self.taken: set[str] = {p.name for p in positional[:1] if pass_context}
        self.var_keyword: bool = any(p.kind == p.VAR_KEYWORD for p in params)
        named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        self.accepted: set[str] = {p.name for p in named}
        self.required: set[str] = {p.name for p in named if p.default is p.empty}
        self.impossible |= any(p.kind == p.POSITIONAL_ONLY and p.default is p.empty for p in params)
        # The parameters a positional argument of enqueue() fills, by name in the payload.
        self.by_position: list[str] = [
            p.name for p in itertools.takewhile(lambda p: p.kind == p.POSITIONAL_OR_KEYWORD, params)
        ]

    def named(self, conn: Any, args: tuple[Any, ...], payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` with ``args`` (given by position after ``conn``, as the typed enqueue
        allows) under the names of the parameters they fill: a job's payload is a JSON object."""
        # A payload given as enqueue()'s only argument lands in conn: say so.  (With arguments by
        # name beside it, conn's own check says what conn must be.)
        if not payload and not args and isinstance(conn, (Mapping, str, int, float, list, tuple)):
            raise InvalidArguments(
                f"task {self.name!r}: enqueue()'s first positional argument is conn, a database "
                f"connection, not a {type(conn).__name__}: give the task's arguments by name "
                f"(it takes {', '.join(self.signature.parameters)})"
            )
        if not args:
            return payload
        if len(args) > len(self.by_position):
            raise InvalidArguments(
                f"task {self.name!r} takes at most {len(self.by_position)} positional "
                f"argument{'s' * (len(self.by_position) != 1)} in a payload, got {len(args)}"
            )
        positional = dict(zip(self.by_position, args, strict=False))
        twice = positional.keys() & payload.keys()
        if twice:
            raise InvalidArguments(
                f"task {self.name!r} got {', '.join(map(repr, sorted(twice)))} twice, "
                "by position and by name"
            )
        return {**positional, **payload}

    def check(self, payload: Mapping[str, Any]) -> None:
        """Raise :class:`InvalidArguments` unless the worker's call would bind ``payload``
        (one set comparison or two per payload: this runs for every job of a bulk enqueue)."""
        if type(payload) is not dict and not isinstance(payload, Mapping):
            return  # encode_payload refuses it, saying why
        keys = payload.keys()
        fits = keys.isdisjoint(self.taken) if self.var_keyword else keys <= self.accepted
        if fits and self.required <= keys and not self.impossible:
            return
        self._refuse(payload)

    def _refuse(self, payload: Mapping[str, Any]) -> None:
        """bind() has the last word (it raises for what the sets only suspect) and the words."""
        keys = payload.keys()
        unexpected = keys & self.taken if self.var_keyword else keys - self.accepted
        problems = [
            f"{what} {', '.join(map(repr, sorted(names)))}"
            for what, names in (
                ("unexpected argument" + "s" * (len(unexpected) > 1), unexpected),
                ("missing argument" + "s" * (len(self.required - keys) > 1), self.required - keys),
            )
            if names
        ]
        try:
            self.signature.bind(*self.context_args, **payload)
            return
        except TypeError as exc:
            problem = "; ".join(problems) or str(exc)
        params = ", ".join(
            str(p.replace(annotation=p.empty)) for p in self.signature.parameters.values()
        )
        raise InvalidArguments(
            f"task {self.name!r} cannot take these arguments: {problem} (it takes {params})"
        )


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
                _uncallable(settings.name, self.arguments.signature, settings.pass_context)
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


def _uncallable(name: str, signature: inspect.Signature, pass_context: bool) -> str:
    """Why no job can call a function of this signature (see :class:`ArgumentCheck`)."""
    params = list(signature.parameters.values())
    takes_context = any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )
    if pass_context and not takes_context:
        return (
            f"task {name!r} is declared with pass_context=True, so the worker passes the job's "
            "context as its first parameter, which it lacks: add one (ctx: JobContext)"
        )
    stuck = [p.name for p in params if p.kind == p.POSITIONAL_ONLY and p.default is p.empty]
    return (
        f"task {name!r} has the positional-only parameter {stuck[-1]!r} without a default, "
        "which no job can fill: the worker passes a job's payload by name"
    )


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
