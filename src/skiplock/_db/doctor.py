"""The read-only statements of ``skiplock doctor`` (sql/doctor.sql), one method each, named
after its statement; rows as dicts.  The checks that read them are in :mod:`skiplock._doctor`.

Driver errors are not translated: a check that may not look (InsufficientPrivilege) says so
(see :meth:`skiplock._doctor.runner.Doctor._guard`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row

from skiplock._db.migration_lock import MIGRATION_KEY
from skiplock._db.presence import SILENT_AFTER
from skiplock._db.sql import Queries

Rows = list[dict[str, Any]]


class DoctorStatements:
    def __init__(self, queries: Queries) -> None:
        self.queries = queries
        self.schema = queries.schema

    def _rows(self, conn: Connection[Any], name: str, params: dict[str, Any]) -> Rows:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self.queries[name], params)
            return cur.fetchall()

    def doctor_session_visibility(self, conn: Connection[Any]) -> Rows:
        return self._rows(conn, "doctor_session_visibility", {})

    def doctor_old_transactions(self, conn: Connection[Any], older_than: float, limit: int) -> Rows:
        params = {"older_than": older_than, "limit": limit}
        return self._rows(conn, "doctor_old_transactions", params)

    def doctor_table_health(self, conn: Connection[Any]) -> Rows:
        return self._rows(conn, "doctor_table_health", {"schema": self.schema})

    def doctor_expired_leases(self, conn: Connection[Any], grace: float) -> Rows:
        return self._rows(conn, "doctor_expired_leases", {"grace": grace})

    def doctor_impossible_states(self, conn: Connection[Any], cap: int) -> Rows:
        return self._rows(conn, "doctor_impossible_states", {"cap": cap})

    def doctor_queues_without_workers(
        self, conn: Connection[Any], cap: int, silent: float = SILENT_AFTER
    ) -> Rows:
        params = {"silent": silent, "cap": cap}
        return self._rows(conn, "doctor_queues_without_workers", params)

    def doctor_workers(self, conn: Connection[Any], silent: float = SILENT_AFTER) -> Rows:
        return self._rows(conn, "doctor_workers", {"silent": silent})

    def doctor_maintenance_leader(self, conn: Connection[Any]) -> Rows:
        return self._rows(conn, "doctor_maintenance_leader", {})

    def doctor_job_indexes(self, conn: Connection[Any], cap: int) -> Rows:
        return self._rows(conn, "doctor_job_indexes", {"schema": self.schema, "cap": cap})

    def doctor_finished_past_retention(
        self,
        conn: Connection[Any],
        statuses: Sequence[str],
        older_than: Sequence[float],
        grace: float,
        cap: int,
    ) -> Rows:
        """Per finished status with a retention: how many jobs are past it by ``grace``."""
        params = {
            "statuses": list(statuses),
            "older_than": list(older_than),
            "grace": grace,
            "cap": cap,
        }
        return self._rows(conn, "doctor_finished_past_retention", params)

    def doctor_connections(self, conn: Connection[Any]) -> Rows:
        return self._rows(conn, "doctor_connections", {})

    def doctor_lock_holders(self, conn: Connection[Any], older_than: float, limit: int) -> Rows:
        params = {
            "schema": self.schema,
            "older_than": older_than,
            "limit": limit,
            "advisory_key": MIGRATION_KEY,
        }
        return self._rows(conn, "doctor_lock_holders", params)
