"""PGQueuer's side: ``pgq run bench.apps.pgqueuer_app:factory`` (asyncpg, its fastest driver)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job

from . import work
from .record import record

ENTRYPOINT = "noop"


@asynccontextmanager
async def factory() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["BENCH_DSN"])
    try:
        pgq = PgQueuer(AsyncpgDriver(connection))

        if work.KIND == "async-io":

            @pgq.entrypoint(ENTRYPOINT)
            async def awaits(job: Job) -> None:
                record(int(job.payload or b"0"))
                await asyncio.sleep(work.SECONDS)

        elif work.KIND == "cpu":

            @pgq.entrypoint(ENTRYPOINT)
            async def burns(job: Job) -> None:
                record(int(job.payload or b"0"))
                work.burn(work.SECONDS)

        elif work.KIND:  # an async-only peer here: no sync-io setting is planned for it
            raise ValueError(f"no PGQueuer handler for BENCH_WORK kind {work.KIND!r}")
        else:

            @pgq.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                record(int(job.payload or b"0"))

        yield pgq
    finally:
        await connection.close()
