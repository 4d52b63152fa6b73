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
        mon.sample()  # looks for backends once, then not for an hour
        with psycopg.connect(pg_dsn, autocommit=True) as late:
            late.execute(BUSY_SQL)
            pid = late.info.backend_pid
            mon.sample()
            assert pid not in mon.backends.last  # not looked for ...
            end = mon.finish()
    finally:
        mon.close()
    assert mon.backends.last.get(pid, 0.0) >= 0.1  # ... until finish(), with its CPU so far
    assert end.pg_cpu >= mon.backends.last[pid]
