"""Enqueueing jobs of the application's registered tasks: the jobs built and checked against
each task's arguments and defaults, the enqueue hooks and meta providers around them, and the
entry points by task name.  A mixin of :class:`~skiplock.app.App`, which holds the state."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from typing import Any

from skiplock._db.caller_connection import AsyncCallerConnection, CallerConnection
from skiplock._db.client_async import AsyncClient
from skiplock._db.client_sync import SyncClient
from skiplock._db.enqueue import (
    EnqueueOptions,
    MetaProvider,
    NewJob,
    NewJobs,
    build_job,
    build_jobs,
    with_provided_meta,
)
from skiplock.backends.base import Backend
from skiplock.errors import UnknownTask
from skiplock.job import Enqueued
from skiplock.task import EnqueueHook, Task


class JobEnqueue:
    # Set by App.__init__.
    tasks: dict[str, Task[Any, Any]]
    meta_providers: list[MetaProvider]
    enqueue_hooks: list[EnqueueHook]
    max_payload_bytes: int
    default_queue: str
    sync_client: SyncClient
    async_client: AsyncClient
    backend: Backend

    def around_enqueue(self, hook: EnqueueHook) -> EnqueueHook:
        """Register ``hook`` (usable as a decorator): called at every enqueue of a task's jobs
        through this app (``task.enqueue``, ``app.enqueue`` and their ``_many`` and async
        forms) with the task's name, the queue and the number of jobs, it returns a context
        manager that wraps building the jobs (so it is current while the meta providers run)
        and inserting them, e.g. a tracing span.  It sees an exception the enqueue raises.
        Hooks nest in the order they were registered, the first outermost."""
        self.enqueue_hooks.append(hook)
        return hook

    def enqueue_meta(self, provider: MetaProvider) -> MetaProvider:
        """Register ``provider`` (usable as a decorator): called at every enqueue through this
        app, in the caller's thread, what it returns is added to each job's ``meta`` (keys
        given to the enqueue itself win), e.g. the current trace context or request id, for
        :meth:`around_job` hooks to take up in the worker."""
        self.meta_providers.append(provider)
        return provider

    def get_task(self, name: str) -> Task[Any, Any]:
        try:
            return self.tasks[name]
        except KeyError:
            raise UnknownTask(name, list(self.tasks)) from None

    def build_jobs(
        self, task_name: str, payloads: Iterable[Mapping[str, Any]], options: EnqueueOptions
    ) -> NewJobs:
        """Validate jobs of a registered task, each payload against its arguments; nothing is
        written if any one is invalid."""
        merged = self._options_for(task_name, options)
        listed = payloads if isinstance(payloads, list) else list(payloads)
        task = self.tasks[task_name]
        check = task.arguments.check
        for payload in listed:
            check(payload)
        return build_jobs(
            task_name,
            listed,
            merged,
            max_payload_bytes=self.max_payload_bytes,
            default=task.encode_default,
        )

    def build_job(
        self, task_name: str, payload: Mapping[str, Any], options: EnqueueOptions
    ) -> NewJob:
        """Validate one job of a registered task, as a row of its own (for mixed batches)."""
        merged = self._options_for(task_name, options)
        task = self.tasks[task_name]
        task.arguments.check(payload)
        return build_job(
            task_name,
            payload,
            merged,
            max_payload_bytes=self.max_payload_bytes,
            default=task.encode_default,
        )

    def _options_for(self, task_name: str, options: EnqueueOptions) -> EnqueueOptions:
        """The task's defaults under ``options``, with the meta providers' keys added."""
        merged = self.get_task(task_name).settings.options.merged(options)
        if self.meta_providers:
            merged = with_provided_meta(merged, self.meta_providers)
        return merged

    # -- enqueue by task name ------------------------------------------------------------

    def enqueue(
        self,
        task_name: str,
        payload: Mapping[str, Any] | None = None,
        *,
        conn: CallerConnection | None = None,
        **options: Any,
    ) -> Enqueued:
        """Enqueue one job of a registered task; options as in :meth:`Task.with_options`."""
        return self.enqueue_many(task_name, [payload or {}], conn=conn, **options)[0]

    async def enqueue_async(
        self,
        task_name: str,
        payload: Mapping[str, Any] | None = None,
        *,
        conn: AsyncCallerConnection | None = None,
        **options: Any,
    ) -> Enqueued:
        return (await self.enqueue_many_async(task_name, [payload or {}], conn=conn, **options))[0]

    def enqueue_many(
        self,
        task_name: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        conn: CallerConnection | None = None,
        **options: Any,
    ) -> list[Enqueued]:
        """Enqueue one job per payload in one statement (thousands per round trip)."""
        return self.insert_jobs(task_name, payloads, EnqueueOptions(**options), conn)

    async def enqueue_many_async(
        self,
        task_name: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        conn: AsyncCallerConnection | None = None,
        **options: Any,
    ) -> list[Enqueued]:
        return await self.insert_jobs_async(task_name, payloads, EnqueueOptions(**options), conn)

    def insert_jobs(
        self,
        task_name: str,
        payloads: Iterable[Mapping[str, Any]],
        options: EnqueueOptions,
        conn: CallerConnection | None,
    ) -> list[Enqueued]:
        """Build and insert one job per payload, within the hooks of :meth:`around_enqueue`."""
        if not self.enqueue_hooks:
            return self.sync_client.enqueue_batch(
                self.build_jobs(task_name, payloads, options), conn
            )
        listed = list(payloads)
        with self._enqueue_hooked(task_name, options, len(listed)):
            return self.sync_client.enqueue_batch(self.build_jobs(task_name, listed, options), conn)

    async def insert_jobs_async(
        self,
        task_name: str,
        payloads: Iterable[Mapping[str, Any]],
        options: EnqueueOptions,
        conn: AsyncCallerConnection | None,
    ) -> list[Enqueued]:
        backend = self.backend
        if not self.enqueue_hooks:
            jobs = self.build_jobs(task_name, payloads, options)
            return await backend.enqueue(jobs, transaction=conn)
        listed = list(payloads)
        with self._enqueue_hooked(task_name, options, len(listed)):
            jobs = self.build_jobs(task_name, listed, options)
            return await backend.enqueue(jobs, transaction=conn)

    def _enqueue_hooked(self, task_name: str, options: EnqueueOptions, count: int) -> ExitStack:
        queue = self.get_task(task_name).settings.options.merged(options).queue
        queue = queue or self.default_queue
        stack = ExitStack()
        with stack:
            for hook in self.enqueue_hooks:
                stack.enter_context(hook(task_name, queue, count))
            return stack.pop_all()
