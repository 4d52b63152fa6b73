"""The :class:`Doctor`: runs ``skiplock doctor``'s checks on one database and schema.

Its seam to the server is small and lives in :mod:`skiplock._doctor.session` (a connection,
and the named statements of ``doctor.sql`` run by :mod:`skiplock._db.doctor`), which the check
modules (:mod:`skiplock._doctor.upkeep`, :mod:`skiplock._doctor.vacuum`,
:mod:`skiplock._doctor.server`, :mod:`skiplock._doctor.locks`) import instead of this runner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import Connection

from skiplock._doctor import locks as doctor_locks
from skiplock._doctor import server as doctor_server
from skiplock._doctor import upkeep as doctor_upkeep
from skiplock._doctor import vacuum as doctor_vacuum
from skiplock._doctor.findings import Finding
from skiplock._doctor.session import DoctorSession


class Doctor(DoctorSession):
    """Runs the checks on one database and schema; each ``check_*`` method returns findings."""

    def run(self) -> list[Finding]:
        """Every check, in order; the table checks only when the schema is in place."""
        with self.connect() as conn:
            findings = self._guard("schema", lambda: [self.check_schema(conn)])
            tables = findings[0].status == "ok"
            findings += self._guard("xmin_horizon", lambda: self.check_xmin_horizon(conn))
            if tables:
                findings += self._guard("dead_tuples", lambda: self.check_dead_tuples(conn))
                findings += self._guard("workers", lambda: [self.check_workers(conn)])
                findings += self._guard("expired_leases", lambda: [self.check_expired_leases(conn)])
                findings += self._guard(
                    "impossible_states", lambda: [self.check_impossible_states(conn)]
                )
                findings += self._guard("claim_index", lambda: self.check_claim_index(conn))
                findings += self._guard("retention", lambda: [self.check_retention(conn)])
                findings += self._guard("archive", lambda: [self.check_archive(conn)])
                findings += self._guard("locks", lambda: [self.check_locks(conn)])
            findings += self._guard("listen", lambda: [self.check_listen()])
            findings += self._guard("connections", lambda: [self.check_connections(conn)])
        return findings

    def _guard(self, check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
        """The check's findings, or one saying this role may not look (a ``warn``)."""
        try:
            return run()
        except psycopg.errors.InsufficientPrivilege as exc:
            return [
                Finding(
                    check,
                    "warn",
                    f"cannot check: {str(exc).strip().splitlines()[0]}",
                    "run doctor as the schema's owner or its admin role (`skiplock roles`)",
                )
            ]

    # -- checks --------------------------------------------------------------------------

    def check_schema(self, conn: Connection[Any]) -> Finding:
        return doctor_upkeep.check_schema(self, conn)

    def check_xmin_horizon(self, conn: Connection[Any]) -> list[Finding]:
        return doctor_vacuum.check_xmin_horizon(self, conn)

    def check_dead_tuples(self, conn: Connection[Any]) -> list[Finding]:
        return doctor_vacuum.check_dead_tuples(self, conn)

    def check_workers(self, conn: Connection[Any]) -> Finding:
        return doctor_upkeep.check_workers(self, conn)

    def check_expired_leases(self, conn: Connection[Any]) -> Finding:
        return doctor_upkeep.check_expired_leases(self, conn)

    def check_impossible_states(self, conn: Connection[Any]) -> Finding:
        return doctor_upkeep.check_impossible_states(self, conn)

    def check_claim_index(self, conn: Connection[Any]) -> list[Finding]:
        return doctor_vacuum.check_claim_index(self, conn)

    def check_retention(self, conn: Connection[Any]) -> Finding:
        return doctor_upkeep.check_retention(self, conn)

    def check_archive(self, conn: Connection[Any]) -> Finding:
        return doctor_upkeep.check_archive(self, conn)

    def check_locks(self, conn: Connection[Any]) -> Finding:
        return doctor_locks.check_locks(self, conn)

    def check_listen(self, notify_dsn: str | None = None) -> Finding:
        """LISTEN on one connection, NOTIFY from another (``notify_dsn``, default the same
        database), and wait for it: what a worker's wake-ups rely on."""
        return doctor_server.check_listen(self, notify_dsn)

    def check_connections(self, conn: Connection[Any]) -> Finding:
        return doctor_server.check_connections(self, conn)
