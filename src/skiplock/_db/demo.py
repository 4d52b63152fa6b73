"""The statements of ``skiplock demo`` (sql/demo.sql), one method each, named after its
statement: the three dequeue patterns of part 1 and the business tables of part 2.  skiplock
itself never runs them; the demo (:mod:`skiplock._demo`) runs them through here, so that only
the database seam executes SQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

from skiplock._db.sql import Queries


class DemoStatements:
    def __init__(self, queries: Queries) -> None:
        self.queries = queries

    def _one(self, conn: Connection[Any], name: str, params: dict[str, Any]) -> Any:
        """The first row of a statement (None when it returned none)."""
        return conn.execute(self.queries[name], params).fetchone()

    def _all(self, conn: Connection[Any], name: str, params: dict[str, Any]) -> list[Any]:
        return conn.execute(self.queries[name], params).fetchall()

    # -- part 1: the dequeue patterns ----------------------------------------------------

    def demo_session_setup(self, conn: Connection[Any]) -> None:
        conn.execute(self.queries["demo_session_setup"])

    def demo_pattern_jobs_insert(self, conn: Connection[Any], queue: str, n: int) -> None:
        conn.execute(self.queries["demo_pattern_jobs_insert"], {"queue": queue, "n": n})

    def demo_naive_peek(self, conn: Connection[Any], queue: str) -> int | None:
        row = self._one(conn, "demo_naive_peek", {"queue": queue})
        return None if row is None else int(row[0])

    def demo_naive_claim(self, conn: Connection[Any], job_id: int, worker: str) -> None:
        conn.execute(self.queries["demo_naive_claim"], {"id": job_id, "worker": worker})

    def demo_claim_wait(self, conn: Connection[Any], queue: str, worker: str) -> int | None:
        row = self._one(conn, "demo_claim_wait", {"queue": queue, "worker": worker})
        return None if row is None else int(row[0])

    def demo_claim_skip(self, conn: Connection[Any], queue: str, worker: str) -> int | None:
        row = self._one(conn, "demo_claim_skip", {"queue": queue, "worker": worker})
        return None if row is None else int(row[0])

    def demo_job_done(self, conn: Connection[Any], job_id: int) -> None:
        conn.execute(self.queries["demo_job_done"], {"id": job_id})

    def demo_pattern_tally(self, conn: Connection[Any], queue: str) -> tuple[int, int, int, int]:
        """(jobs, claims, duplicate claims, unfinished jobs) of one run's queue."""
        jobs, claims, duplicates, unfinished = self._one(
            conn, "demo_pattern_tally", {"queue": queue}
        )
        return jobs, claims, duplicates, unfinished

    def demo_lock_waits(self, conn: Connection[Any], pids: Sequence[int]) -> int:
        row = self._one(conn, "demo_lock_waits", {"pids": list(pids)})
        return int(row[0]) if row else 0

    # -- part 2: at work -----------------------------------------------------------------

    def demo_jobs_reset(self, conn: Connection[Any]) -> None:
        conn.execute(self.queries["demo_jobs_reset"])

    def demo_tables_create(self, conn: Connection[Any]) -> None:
        conn.execute(self.queries["demo_tables_create"])

    def demo_order_insert(self, conn: Connection[Any], customer: str, total_cents: int) -> int:
        params = {"customer": customer, "total_cents": total_cents}
        return int(self._one(conn, "demo_order_insert", params)[0])

    def demo_order_count(self, conn: Connection[Any], order_id: int) -> int:
        return int(self._one(conn, "demo_order_count", {"id": order_id})[0])

    def demo_effect_record(self, conn: Connection[Any], job: int, attempt: int, pid: int) -> None:
        params = {"job": job, "attempt": attempt, "pid": pid}
        conn.execute(self.queries["demo_effect_record"], params)

    def demo_effect_list(
        self, conn: Connection[Any], job_ids: Sequence[int]
    ) -> list[tuple[int, int, int]]:
        """(job id, attempt, pid) of each side effect of the given jobs, oldest first."""
        rows = self._all(conn, "demo_effect_list", {"ids": list(job_ids)})
        return [(r[0], r[1], r[2]) for r in rows]

    def demo_jobs_tally(self, conn: Connection[Any], job_ids: Sequence[int]) -> dict[str, int]:
        """How many of the given jobs are in each status."""
        return dict(self._all(conn, "demo_jobs_tally", {"ids": list(job_ids)}))
