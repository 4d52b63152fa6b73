"""What the value bounds of migration 0014 cost: jobs inserted by SQL and by ``enqueue_many``,
then updated as a retry would (checked) and as a claim would (not checked), with the
``jobs_bound_*`` constraints and without them, interleaved; and the client's JSON shape check
in ``build_jobs``.  Prints min / median milliseconds over the repetitions.

    python -m bench.bounds_cost [--dsn postgresql://...] [--jobs 10000] [--repeat 9]

It works in a schema of its own (``bench_bounds``), dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from skiplock import App
from skiplock._db import payload
from skiplock._db.enqueue import EnqueueOptions

SCHEMA = "bench_bounds"
JOBS = sql.Identifier(SCHEMA, "jobs")
PAYLOADS: dict[str, dict[str, Any]] = {
    "small": {"to": "user@example.com", "subject": "Your receipt", "order": 12345},
    "nested": {
        "order": {
            "id": 1,
            "lines": [{"sku": f"s{i}", "qty": i, "tags": ["a", "b"]} for i in range(20)],
        }
    },
}
INSERT = sql.SQL(
    "INSERT INTO {} (queue, task, payload, entity_key) "
    "SELECT 'q', 't', %s::jsonb, 'k' || g FROM generate_series(1, %s) g"
).format(JOBS)
RETRY = sql.SQL("UPDATE {} SET status = 'pending', attempts = 1").format(JOBS)
CLAIM = sql.SQL("UPDATE {} SET status = 'running', attempts = 2").format(JOBS)
TRUNCATE = sql.SQL("TRUNCATE {}").format(JOBS)


def timed(action: Callable[..., object], *args: Any) -> float:
    start = time.perf_counter()
    action(*args)
    return (time.perf_counter() - start) * 1e3


def cells(times: list[float]) -> str:
    return f"{min(times):7.1f} / {statistics.median(times):7.1f}"


def set_bounds(db: psycopg.Connection[Any], bounds: list[tuple[str, str]], on: bool) -> None:
    for name, definition in bounds:
        db.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(
                JOBS, sql.Identifier(name)
            )
        )
        if on:
            db.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                    JOBS,
                    sql.Identifier(name),
                    sql.SQL(definition),  # type: ignore[arg-type]
                )
            )


def one_round(db: psycopg.Connection[Any], app: App, job: dict[str, Any], n: int) -> list[float]:
    db.execute(TRUNCATE)
    figures = [timed(db.execute, INSERT, [json.dumps(job), n])]
    figures.append(timed(db.execute, RETRY))
    figures.append(timed(db.execute, CLAIM))
    db.execute(TRUNCATE)
    figures.append(timed(app.enqueue_many, "t", [job] * n))
    return figures


def build(app: App, jobs: list[dict[str, Any]], checked: bool) -> float:
    check = payload.json_shape_error
    if not checked:
        payload.json_shape_error = lambda text, levels=0: None
    try:
        return timed(app.build_jobs, "t", jobs, EnqueueOptions())
    finally:
        payload.json_shape_error = check


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    app = App(args.dsn, SCHEMA)
    app.migrate()
    app.task(name="t")(lambda **kwargs: None)
    columns = ("SQL insert", "update, checked", "update to running", "enqueue_many")
    try:
        with psycopg.connect(args.dsn, autocommit=True) as db:
            bounds = db.execute(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = %s::regclass AND conname LIKE 'jobs_bound_%%'",
                [f"{SCHEMA}.jobs"],
            ).fetchall()
            for label, job in PAYLOADS.items():
                found: dict[bool, list[list[float]]] = {True: [], False: []}
                for _ in range(args.repeat):
                    for on in (True, False):
                        set_bounds(db, bounds, on)
                        found[on].append(one_round(db, app, job, args.jobs))
                size = len(json.dumps(job))
                print(f"{label} payload ({size} bytes), ms per {args.jobs} jobs, min / median")
                for on in (True, False):
                    figures = zip(columns, zip(*found[on], strict=True), strict=True)
                    line = "  ".join(f"{name} {cells(list(t))}" for name, t in figures)
                    print(f"  bounds {'on ' if on else 'off'}: {line}")
            set_bounds(db, bounds, True)
        for label, job in PAYLOADS.items():
            many = [job] * args.jobs
            shapes = {on: [build(app, many, on) for _ in range(args.repeat)] for on in (1, 0)}
            print(
                f"build_jobs, {label} payload x{args.jobs}: with the shape check "
                f"{cells(shapes[1])}, without {cells(shapes[0])}"
            )
    finally:
        app.sync_client.drop_schema()
        app.close()


if __name__ == "__main__":
    main()
