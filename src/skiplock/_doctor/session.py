"""What every check of ``skiplock doctor`` works with: one database and schema, the thresholds,
and the seam to the server (:meth:`DoctorSession.connect`, and :attr:`DoctorSession.statements`,
whose methods run the named statements of ``doctor.sql``: :mod:`skiplock._db.doctor`).  The
check modules take a session; the :class:`~skiplock._doctor.runner.Doctor` that runs them all
is one."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import Connection

from skiplock._db.bounds import check_schema_name
from skiplock._db.connections import connect_kwargs, unavailable
from skiplock._db.doctor import DoctorStatements
from skiplock._db.sql import Queries
from skiplock._db.store_sync import SyncStore
from skiplock._doctor.findings import Thresholds

APPLICATION_NAME = "skiplock-doctor"


def connect(dsn: str) -> Connection[Any]:
    """A session on ``dsn`` named ``skiplock-doctor``; a clear error when there is none."""
    kwargs = {**connect_kwargs(dsn), "application_name": APPLICATION_NAME}
    try:
        return Connection.connect(dsn, **kwargs)
    except psycopg.OperationalError as exc:
        raise unavailable(exc, dsn) from None


class DoctorSession:
    """One database and schema to check, with the thresholds the checks judge by."""

    def __init__(self, dsn: str, schema: str, thresholds: Thresholds | None = None) -> None:
        self.dsn = dsn
        self.schema = check_schema_name(schema)
        self.thresholds = thresholds or Thresholds()
        self.queries = Queries(self.schema)
        self.store = SyncStore(self.queries)
        self.statements = DoctorStatements(self.queries)

    def connect(self) -> Connection[Any]:
        return connect(self.dsn)
