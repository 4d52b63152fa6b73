"""PGQueuer's side: ``pgq run bench.apps.pgqueuer_app:factory`` (asyncpg, its fastest driver)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job

from . import work

ENTRYPOINT = "noop"


@asynccontextmanager
async def factory() -> AsyncIterator[PgQueuer]:
    if work.SYNC:  # an async-only peer here: no sync-io setting is planned for it
        raise ValueError(f"no PGQueuer handler for BENCH_WORK kind {work.KIND!r}")
    connection = await asyncpg.connect(os.environ["BENCH_DSN"])
    try:
        pgq = PgQueuer(AsyncpgDriver(connection))

        @pgq.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            await work.run_async(int(job.payload or b"0"))

        if os.environ.get("BENCH_OTHER_QUEUE") == "1":  # the under-load workload's second queue

            @pgq.entrypoint("other")
            async def other(job: Job) -> None:
                await work.run_async(int(job.payload or b"0"))

        yield pgq
    finally:
        await connection.close()
