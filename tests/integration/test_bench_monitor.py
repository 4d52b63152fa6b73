"""The bench's monitor counts the CPU of backends that connected after its last look for them
(``Monitor.finish``): a 20,000-job drain shorter than its refresh interval once reported 0 µs
of PostgreSQL CPU per job, the workers' backends never seen."""

from __future__ import annotations

import psycopg
from bench.db import BenchDatabase
from bench.runner import Monitor
from psycopg.conninfo import conninfo_to_dict

BUSY_SQL = "SELECT sum(g) FROM generate_series(1, 4000000) AS g"  # ~0.2-0.5 s of CPU


def test_a_backend_that_came_after_the_last_look_counts_at_finish(pg_dsn: str) -> None:
    name = conninfo_to_dict(pg_dsn).get("dbname") or "postgres"
    mon = Monitor(BenchDatabase(pg_dsn, str(name)), lambda: [], refresh_every=3600.0)
    try:
        start = mon.sample()  # looks for backends once, then not for an hour
        with psycopg.connect(pg_dsn, autocommit=True) as late:
            late.execute(BUSY_SQL)
            seen_before = mon.sample()
            end = mon.finish()
    finally:
        mon.close()
    assert seen_before.pg_cpu - start.pg_cpu < 0.05  # the late backend is not looked for ...
    assert end.pg_cpu - start.pg_cpu >= 0.1  # ... until finish()
