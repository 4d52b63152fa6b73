"""Registering the application's tasks: ``@app.task``, ``@app.periodic`` and the workers' hooks
(``on_event``, ``around_job``).  A mixin of :class:`~skiplock.app.App`, which holds the state."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Concatenate, Literal, ParamSpec, Protocol, TypeVar, cast, overload

from skiplock._app_enqueue import JobEnqueue
from skiplock._db.bounds import check_task_name
from skiplock._db.enqueue import EnqueueOptions
from skiplock._runtime.periodic import PeriodicTask, Schedule
from skiplock._task_settings import ExceptionTypes, WorkerModel, checked_settings
from skiplock.backends.base import Completion
from skiplock.errors import ConfigurationError
from skiplock.events import JobEvent
from skiplock.retry import RetryPolicy
from skiplock.serializer import Serializer
from skiplock.task import ContextTask, JobContext, JobHook, Task

P = ParamSpec("P")
R = TypeVar("R")


class PeriodicDecorator(Protocol):
    """What ``@app.periodic(...)`` returns: a task keeps its type (a :class:`ContextTask`
    stays one), a function becomes a :class:`Task`."""

    @overload
    def __call__(self, func: ContextTask[P, R], /) -> ContextTask[P, R]: ...

    @overload
    def __call__(self, func: Callable[P, R], /) -> Task[P, R]: ...


class ContextPeriodicDecorator(Protocol):
    """What ``@app.periodic(..., pass_context=True)`` returns: its function takes the
    :class:`JobContext` first, which ``enqueue`` leaves out."""

    def __call__(self, func: Callable[Concatenate[JobContext, P], R], /) -> ContextTask[P, R]: ...


class TaskRegistry(JobEnqueue):
    # Set by App.__init__.
    periodic_tasks: dict[str, PeriodicTask]
    _optionless_periodic: set[str]  # periodic tasks registered without task options
    event_listeners: list[Callable[[JobEvent], None]]
    job_hooks: list[JobHook]
    completion: Completion
    serializer: Serializer

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        max_attempts: int = 5,
        retry: RetryPolicy | None = None,
        model: WorkerModel | None = None,
        pass_context: Literal[False] = False,
        timeout: float | None = None,
        secret: Iterable[str] = (),
        store_result: bool = False,
        retry_on: ExceptionTypes = Exception,
        no_retry_on: ExceptionTypes = (),
        serializer: Serializer | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        max_attempts: int = 5,
        retry: RetryPolicy | None = None,
        model: WorkerModel | None = None,
        pass_context: Literal[True],
        timeout: float | None = None,
        secret: Iterable[str] = (),
        store_result: bool = False,
        retry_on: ExceptionTypes = Exception,
        no_retry_on: ExceptionTypes = (),
        serializer: Serializer | None = None,
    ) -> Callable[[Callable[Concatenate[JobContext, P], R]], ContextTask[P, R]]: ...

    def task(  # type: ignore[misc]  # mypy cannot match a ParamSpec bound only by the result
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        max_attempts: int = 5,
        retry: RetryPolicy | None = None,
        model: WorkerModel | None = None,
        pass_context: bool = False,
        timeout: float | None = None,
        secret: Iterable[str] = (),
        store_result: bool = False,
        retry_on: ExceptionTypes = Exception,
        no_retry_on: ExceptionTypes = (),
        serializer: Serializer | None = None,
    ) -> Task[P, R] | Callable[[Callable[..., R]], Task[Any, R]]:
        """Register a function as a task; its keyword arguments are the job's JSON payload.

        ``model`` picks how workers run it: ``"lease"`` (claim commits, heartbeats keep it) or
        ``"held"`` (the row lock is held in one transaction for the whole job); None leaves it
        to the worker (lease by default).  ``timeout`` (seconds) fails an attempt that runs
        longer; it is then retried like any failure.  ``secret`` names payload fields whose
        values are replaced by ``***`` in stored errors and logs (payloads are never logged).
        ``store_result`` keeps what the task returns (JSON, within ``max_payload_bytes``) on
        its done job, as ``Job.result`` (see :meth:`wait_for_job`); a return value that cannot
        be stored fails the attempt.  It needs finished jobs kept (completion keep or archive).
        A failed attempt is retried (while attempts are left) when its exception is one of
        ``retry_on`` (default: any) and none of ``no_retry_on``; otherwise, or when the task
        raises :class:`Fail`, the job is ``failed`` at once.  ``serializer`` encodes this
        task's arguments and result instead of the app's serializer.
        """

        def register(func: Callable[..., R]) -> Task[Any, R]:
            scheduled = self._scheduled_task_to_redefine(func, name)
            if scheduled is not None:
                # @app.task(...) above @app.periodic(...): the same task, with these options
                func, task_name = scheduled.fn, scheduled.name
            else:
                task_name = check_task_name(name or f"{func.__module__}.{func.__qualname__}")
            if task_name in self.tasks and scheduled is None:
                raise ConfigurationError(f"a task named {task_name!r} is already registered")
            if name is None and scheduled is None:
                self._warn_if_imported_twice(func, task_name)
            settings = checked_settings(
                self,
                task_name,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                retry=retry,
                model=model,
                pass_context=pass_context,
                timeout=timeout,
                secret=secret,
                store_result=store_result,
                retry_on=retry_on,
                no_retry_on=no_retry_on,
                serializer=serializer,
            )
            kind = ContextTask if pass_context else Task
            registered: Task[Any, R] = kind(self, func, settings)
            self.tasks[task_name] = registered
            if scheduled is not None:
                self._optionless_periodic.discard(task_name)
                periodic = self.periodic_tasks[task_name]
                self.build_jobs(periodic.task, [periodic.payload], EnqueueOptions())
            return registered

        return register(fn) if fn is not None else register

    def _warn_if_imported_twice(self, func: Callable[..., Any], task_name: str) -> None:
        """Warn when ``func`` is the same source as a task registered under another name: its
        module was imported under two names (both folders on ``sys.path``)."""
        code = getattr(func, "__code__", None)
        if code is None:
            return
        here = (code.co_filename, code.co_firstlineno, func.__qualname__)
        for other in self.tasks.values():
            theirs = getattr(other.fn, "__code__", None)
            if theirs is not None and here == (
                theirs.co_filename,
                theirs.co_firstlineno,
                other.fn.__qualname__,
            ):
                warnings.warn(
                    f"task {task_name!r} is the function of task {other.name!r}: its module "
                    "was imported under two names, so jobs enqueued under one fail in a worker "
                    "that knows the other (and a periodic task gets a job per name and tick); "
                    "import it one way, or give the task name=",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return

    def _scheduled_task_to_redefine(
        self, func: Callable[P, R], name: str | None
    ) -> Task[P, R] | None:
        """The task ``func`` is when ``@app.task(...)`` decorates what ``@app.periodic(...)``
        registered without task options; None for a plain function; TypeError otherwise."""
        if not isinstance(func, Task):
            return None
        if func.app is not self:
            raise TypeError(f"{func.name!r} is a task of another App")
        if func.name not in self._optionless_periodic:
            raise TypeError(
                f"{func.name!r} is already a task with its options: give them once, to "
                "@app.task(...) or to @app.periodic(...)"
            )
        if name is not None and name != func.name:
            raise TypeError("name the task once, in @app.periodic(...) or in @app.task(...)")
        return func

    @overload
    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | None = None,
        name: str | None = None,
        payload: Mapping[str, Any] | None = None,
        catch_up: int = 0,
        misfire_grace: float = 60.0,
        timezone: str | None = None,
        pass_context: Literal[True],
        **task_options: Any,
    ) -> ContextPeriodicDecorator: ...

    @overload
    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | None = None,
        name: str | None = None,
        payload: Mapping[str, Any] | None = None,
        catch_up: int = 0,
        misfire_grace: float = 60.0,
        timezone: str | None = None,
        pass_context: Literal[False] = False,
        **task_options: Any,
    ) -> PeriodicDecorator: ...

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | None = None,
        name: str | None = None,
        payload: Mapping[str, Any] | None = None,
        catch_up: int = 0,
        misfire_grace: float = 60.0,
        timezone: str | None = None,
        **task_options: Any,
    ) -> PeriodicDecorator | ContextPeriodicDecorator:
        """Register a task that runs on a schedule: ``cron`` (5 fields, read in ``timezone``,
        an IANA name, UTC by default; see :class:`~skiplock._runtime.periodic.Schedule` for daylight
        saving time) or ``every`` seconds.

        Exactly one job is enqueued per tick however many workers run; ticks missed for longer
        than ``misfire_grace`` seconds are skipped unless ``catch_up`` asks for the last few.
        """
        schedule = Schedule(cron, every, catch_up, misfire_grace, timezone)

        def register(func: Callable[P, R]) -> Task[P, R]:
            registered: Task[P, R]
            if isinstance(func, Task):
                # @app.periodic(...) above @app.task(...): the task keeps its options
                if func.app is not self:
                    raise TypeError(f"{func.name!r} is a task of another App")
                if name is not None or task_options:
                    raise TypeError(
                        f"{func.name!r} is already a task with its options: give them once, to "
                        "@app.task(...) or to @app.periodic(...)"
                    )
                registered = func
            else:
                # Any options, pass_context among them: no overload of task() is known to match.
                decorate = cast(
                    Callable[[Callable[P, R]], Task[P, R]], self.task(name=name, **task_options)
                )
                registered = decorate(func)
                if not task_options:
                    self._optionless_periodic.add(registered.name)
            if registered.name in self.periodic_tasks:
                raise ConfigurationError(f"{registered.name!r} already runs on a schedule")
            periodic = PeriodicTask(registered.name, registered.name, schedule, dict(payload or {}))
            self.build_jobs(periodic.task, [periodic.payload], EnqueueOptions())
            self.periodic_tasks[periodic.name] = periodic
            return registered

        return cast(PeriodicDecorator, register)

    def on_event(self, listener: Callable[[JobEvent], None]) -> Callable[[JobEvent], None]:
        """Register ``listener`` (usable as a decorator) to receive every :class:`JobEvent` of
        the workers that run this app, ``skiplock worker`` included: a job started, a job
        finished with its outcome and error (e.g. report ``failed`` ones to an error tracker).
        It runs in the worker's event loop: keep it quick, hand slow work to a thread; an
        exception it raises is logged, never the job's outcome."""
        self.event_listeners.append(listener)
        return listener

    def around_job(self, hook: JobHook) -> JobHook:
        """Register ``hook`` (usable as a decorator): called with each job a worker runs, it
        returns a context manager that wraps the task's call, e.g. a tracing span, a logging
        context, an error tracker's scope.  It is entered in the task's own thread for a sync
        task (so context variables and thread-locals it sets reach the task), in the job's
        asyncio task for an async one (keep it quick there; within ``ctx.conn``'s savepoint);
        it sees the task's exception.  An exception it raises fails the attempt like the
        task's own.  Hooks nest in the order they were registered, the first outermost."""
        self.job_hooks.append(hook)
        return hook
