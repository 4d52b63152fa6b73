"""The application object: its settings and clients (the task registry and the workers' hooks
come from :class:`~skiplock._app_tasks.TaskRegistry`, enqueueing from
:class:`~skiplock._app_enqueue.JobEnqueue`, job and schema administration from
:class:`~skiplock._app_admin.JobAdmin`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from skiplock._app_admin import JobAdmin
from skiplock._app_tasks import TaskRegistry
from skiplock._db.bounds import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    check_queue_name,
    check_schema_name,
)
from skiplock._db.client_async import AsyncClient
from skiplock._db.client_sync import SyncClient
from skiplock._db.connections import (
    check_dsn,
    prepared_statements_setting,
    resolve_dsn,
    resolve_read_dsn,
)
from skiplock._db.enqueue import MetaProvider
from skiplock._db.sql import Queries
from skiplock._db.store_async import AsyncStore
from skiplock._db.store_sync import SyncStore
from skiplock._runtime.periodic import PeriodicTask
from skiplock._task_settings import checked_serializer
from skiplock.backends.base import Backend
from skiplock.backends.postgres import PostgresBackend
from skiplock.errors import ConfigurationError
from skiplock.events import JobEvent
from skiplock.serializer import DEFAULT_SERIALIZER, Serializer
from skiplock.task import EnqueueHook, JobHook, Task

Completion = Literal["keep", "delete", "archive"]
DAY = 86400.0
# Seconds a finished job is kept before the maintenance leader deletes it (None: forever), per
# status in the jobs table, and in jobs_archive under "archive" (docs/design.md, "An archive
# that stays healthy").
DEFAULT_RETENTION: dict[str, float | None] = {
    "done": DAY,
    "cancelled": DAY,
    "failed": 7 * DAY,
    "archive": 30 * DAY,
}
COMPLETIONS: tuple[Completion, ...] = ("keep", "delete", "archive")


class App(TaskRegistry, JobAdmin):
    """A skiplock application.

    ``dsn`` may be left out: skiplock then uses ``SKIPLOCK_DATABASE_URL``, ``DATABASE_URL``, or
    the embedded server, on first use.  Everything lives in ``schema``.  ``completion`` says what
    happens to a job that succeeded: kept as ``done``, deleted, or moved to ``jobs_archive``;
    ``retention`` how long finished jobs are kept, per status, before workers prune them, and
    archived ones under ``"archive"`` (30 days by default).
    ``prepared_statements=False`` (or ``SKIPLOCK_PREPARED_STATEMENTS=off``) is for a
    transaction-mode pooler that does not track prepared statements, such as PgBouncer before
    1.21 (see docs/operations.md); None takes the environment's setting, on by default.
    ``serializer`` turns task arguments and results into JSON and back (a task may have its
    own): by default a :class:`~skiplock.serializer.JSONSerializer`, which takes datetimes,
    UUIDs, Decimals, enums, dataclasses and pydantic models (see docs/tasks.md).
    ``backend``: where jobs are enqueued (async), claimed by leasing workers and finished
    (a :class:`~skiplock.backends.Backend`; by default a
    :class:`~skiplock.backends.PostgresBackend` on the app's own client); the app does not
    close a backend it was given.  PostgreSQL-only features stay on ``dsn`` whatever the
    backend (docs/backends.md, "Beyond the contract").
    ``read_dsn`` (else ``SKIPLOCK_READ_DATABASE_URL``): a standby that ``skiplock status``,
    ``skiplock jobs list``, the dashboard's pages and the metrics exporter read from, through
    :attr:`read_sync_client` / :attr:`read_async_client`; everything that writes (enqueue,
    actions, workers) stays on ``dsn`` (see docs/operations.md, "Reads from a standby").
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str = "skiplock",
        *,
        completion: Completion = "keep",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        default_queue: str = "default",
        retention: Mapping[str, float | None] | None = None,
        prepared_statements: bool | None = None,
        serializer: Serializer | None = None,
        read_dsn: str | None = None,
        backend: Backend | None = None,
    ) -> None:
        self.serializer: Serializer = checked_serializer(serializer) or DEFAULT_SERIALIZER
        if completion not in COMPLETIONS:
            raise ConfigurationError(f"completion must be one of {COMPLETIONS}, got {completion!r}")
        if max_payload_bytes <= 0:
            raise ConfigurationError("max_payload_bytes must be > 0")
        self._dsn = check_dsn(dsn) if dsn else None
        self._read_dsn = resolve_read_dsn(read_dsn)
        self.schema: str = check_schema_name(schema)
        self.completion: Completion = completion
        self.max_payload_bytes = max_payload_bytes
        self.default_queue: str = check_queue_name(default_queue)
        self.queries: Queries = Queries(self.schema)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.periodic_tasks: dict[str, PeriodicTask] = {}
        # Periodic tasks registered without task options: an @app.task above may still give them
        self._optionless_periodic: set[str] = set()
        self.event_listeners: list[Callable[[JobEvent], None]] = []
        self.job_hooks: list[JobHook] = []
        self.meta_providers: list[MetaProvider] = []
        self.enqueue_hooks: list[EnqueueHook] = []
        self.retention: dict[str, float | None] = dict(DEFAULT_RETENTION)
        for status, seconds in (retention or {}).items():
            if status not in DEFAULT_RETENTION:
                raise ConfigurationError(
                    f"retention is kept per finished status and archive "
                    f"{sorted(DEFAULT_RETENTION)}, "
                    f"not {status!r}"
                )
            self.retention[status] = seconds
        self.prepared_statements: bool = prepared_statements_setting(prepared_statements)
        self.sync_client: SyncClient = SyncClient(
            lambda: self.dsn, SyncStore(self.queries), prepare=self.prepared_statements
        )
        self.async_client: AsyncClient = AsyncClient(
            lambda: self.dsn, AsyncStore(self.queries), prepare=self.prepared_statements
        )
        self.backend: Backend = backend or PostgresBackend.on_client(self.async_client)
        # Clients on the read DSN, opened only when there is one.
        self._read_sync = SyncClient(
            lambda: self._read_dsn or self.dsn,
            SyncStore(self.queries),
            prepare=self.prepared_statements,
        )
        self._read_async = AsyncClient(
            lambda: self._read_dsn or self.dsn,
            AsyncStore(self.queries),
            prepare=self.prepared_statements,
        )

    def __repr__(self) -> str:
        return f"<skiplock.App schema={self.schema!r} tasks={sorted(self.tasks)}>"

    @property
    def dsn(self) -> str:
        """The database URL, resolved on first use (which may start the embedded server)."""
        if self._dsn is None:
            self._dsn = resolve_dsn(None)
        return self._dsn

    def use_dsn(self, dsn: str) -> None:
        """Point the app at another database (the CLI's ``--dsn``); only before first use."""
        self._dsn = check_dsn(dsn)

    @property
    def read_dsn(self) -> str | None:
        """The database the read-only views read from, None when they read from :attr:`dsn`."""
        return self._read_dsn

    def use_read_dsn(self, dsn: str | None) -> None:
        """Have the read-only views read from ``dsn`` (the CLI's ``--read-dsn``); only before
        first use."""
        self._read_dsn = resolve_read_dsn(dsn)

    @property
    def read_sync_client(self) -> SyncClient:
        """The client for reads that may be stale: on :attr:`read_dsn` when set, else the app's
        own :attr:`sync_client` (no second pool)."""
        return self._read_sync if self._read_dsn else self.sync_client

    @property
    def read_async_client(self) -> AsyncClient:
        """:attr:`read_sync_client`'s async twin."""
        return self._read_async if self._read_dsn else self.async_client

    # -- administration ------------------------------------------------------------------

    def close(self) -> None:
        self.sync_client.close()
        self._read_sync.close()

    async def close_async(self) -> None:
        await self.async_client.close()
        await self._read_async.close()
