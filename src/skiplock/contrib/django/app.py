"""An :class:`~skiplock.App` at home in a Django project: its database and schema come from the
settings, and its sync enqueues write on Django's connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skiplock._db.caller_connection import CallerConnection
from skiplock._db.client_sync import SyncClient
from skiplock._db.enqueue import NewJobs
from skiplock._db.store_sync import SyncStore
from skiplock.app import App
from skiplock.contrib.django import settings
from skiplock.job import Enqueued, Job


class DjangoApp(App):
    """An App whose ``enqueue()`` (of its tasks too) with no ``conn`` writes on
    ``django.db.connections[database]``: in ``transaction.atomic()``, the job is part of it;
    outside, it commits at once, like a ``save()``.  The testing helpers
    (:mod:`skiplock.testing`) read there too, so a ``TestCase`` sees what it enqueued.

    ``database`` is an alias of ``DATABASES`` (default: the ``SKIPLOCK_DATABASE`` setting, else
    ``"default"``), and ``schema`` defaults to ``SKIPLOCK_SCHEMA``, else ``"skiplock"``.  With no
    ``dsn``, skiplock's own connections (the worker's, ``enqueue_async()``'s) go to that same
    database.  Create it once Django's settings are configured (in a tasks module, say).
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str | None = None,
        *,
        database: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(dsn, schema or settings.schema(), **options)
        self.database: str = database or settings.database_alias()
        self.sync_client: SyncClient = DjangoClient(
            lambda: self.dsn,
            SyncStore(self.queries),
            prepare=self.prepared_statements,
            default_conn=self._django_connection,
        )

    @property
    def dsn(self) -> str:
        """The DSN given, else that of Django's connection, read at each use (the test runner
        renames the database)."""
        return self._dsn or settings.dsn(self.database)

    def _django_connection(self) -> CallerConnection:
        from django.db import connections

        connection: CallerConnection = connections[self.database]
        return connection


class DjangoClient(SyncClient):
    """The sync client, on Django's connection where skiplock writes or reads in the caller's
    transaction (enqueue, the testing helpers) and none is given."""

    def __init__(
        self, *args: Any, default_conn: Callable[[], CallerConnection], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._default_conn = default_conn

    def enqueue_batch(self, jobs: NewJobs, conn: CallerConnection | None = None) -> list[Enqueued]:
        return super().enqueue_batch(jobs, conn if conn is not None else self._default_conn())

    def find_waiting(
        self,
        task: str,
        payload: dict[str, Any],
        queue: str | None = None,
        conn: CallerConnection | None = None,
    ) -> list[Job]:
        conn = conn if conn is not None else self._default_conn()
        return super().find_waiting(task, payload, queue, conn)
