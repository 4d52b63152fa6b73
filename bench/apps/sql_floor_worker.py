"""The latency floor's worker: the seed's design in raw SQL, with no library around it.

``python -m bench.apps.sql_floor_worker``: one psycopg connection that LISTENs, and on every
notification (or after a 1 s fallback poll) claims up to 10 due jobs with the seed's single
statement (lease committed at once, autocommit), records each job's number (the handler
start), then marks them done with an ownership-checked update.  What any PostgreSQL queue
built this way pays between an enqueue and a handler start: the enqueue's commit, the
notification, the claim's commit, and the round trips between them, on the same driver as
skiplock.  SIGTERM stops it after the current round.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import psycopg

from .record import record

CHANNEL = "sql_floor"

CLAIM = """
WITH next AS (
    SELECT id FROM ceiling_jobs WHERE status = 'pending' AND run_at <= now()
    ORDER BY priority, run_at LIMIT 10 FOR UPDATE SKIP LOCKED
)
UPDATE ceiling_jobs AS j
SET status = 'running', locked_by = %(w)s, locked_at = now(), attempts = j.attempts + 1,
    locked_until = now() + interval '5 minutes'
FROM next WHERE j.id = next.id
RETURNING j.id, j.attempts, j.payload
"""

FINISH = """
UPDATE ceiling_jobs AS j SET status = 'done', locked_until = NULL
FROM unnest(%(ids)s::bigint[], %(att)s::int[]) AS c(id, attempts)
WHERE j.id = c.id AND j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = %(w)s
"""


async def main() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    worker = f"floor-{os.getpid()}"
    conn = await psycopg.AsyncConnection.connect(os.environ["BENCH_DSN"], autocommit=True)
    async with conn:
        await conn.execute(f"LISTEN {CHANNEL}")
        while not stop.is_set():
            cur = await conn.execute(CLAIM, {"w": worker}, prepare=True)
            rows: list[Any] = await cur.fetchall()
            for _, _, payload in rows:
                record(payload["n"])
            if rows:
                params = {"ids": [r[0] for r in rows], "att": [r[1] for r in rows], "w": worker}
                await conn.execute(FINISH, params, prepare=True)
                continue
            # Nothing due: wait for a notification, the fallback poll, or SIGTERM.
            async for _ in conn.notifies(timeout=1.0, stop_after=1):
                pass


if __name__ == "__main__":
    asyncio.run(main())
