"""The charts' counts of the finished jobs that leave the jobs table (finished_counts, migration
0025, written through finished_counts_add, migration 0026): each statement that removes finished
jobs counts exactly the done and failed ones it removed, by minute and queue, with their waits'
sum, max and histogram.  The expected counts are worked out here from the rows as they were
before the removal, not by the server.  Real server."""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers.role_logins import KINDS, role_logins
from helpers.stores import SyncStore
from skiplock import App
from skiplock._db.sql import statements
from skiplock.job import Claim
from skiplock.testing import drain

# The statements that remove rows from the jobs table, by the path that runs them.
PATHS = {
    "completion delete": "job_delete_many",
    "completion archive": "job_archive_many",
    "prune": "job_prune_finished",
    "bulk delete": "job_delete_finished_many",
}
# Waits in seconds, one a job, spread over the buckets (none on a bucket's bound).
WAITS = [0.0, 0.0004, 0.05, 0.5, 0.6, 4.0, 40.0, 0.05]
QUEUES = ["emails", "reports"]


def bucket(wait: float) -> int:
    """finished_wait_bucket of migration 0025, in Python."""
    return 0 if wait <= 0.001 else min(math.ceil(4 * math.log(wait / 0.001) / math.log(2)), 160)


def expected(removed: list[tuple[datetime, str, str, float]]) -> dict[tuple[Any, str], Any]:
    """(minute, queue) -> (done, failed, wait sum, wait max, {bucket: jobs}) of the removed
    rows (finish time, queue, status, wait) that are done or failed."""
    out: dict[tuple[Any, str], Any] = {}
    for finished, queue, status, wait in removed:
        if status not in ("done", "failed"):
            continue
        key = (finished.replace(second=0, microsecond=0), queue)
        done, failed, total, most, buckets = out.get(key, (0, 0, 0.0, 0.0, Counter()))
        buckets[bucket(wait)] += 1
        out[key] = (done + (status == "done"), failed + (status == "failed"), total + wait,
                    max(most, wait), buckets)  # fmt: skip
    return out


def counted(db: psycopg.Connection[Any], schema: str) -> dict[tuple[Any, str], Any]:
    """The counts in finished_counts, summed by (minute, queue) as the charts read them."""
    out: dict[tuple[Any, str], Any] = {}
    rows = db.execute(
        f'SELECT minute, queue, done, failed, wait_sum, wait_max, buckets, counts FROM "{schema}"'
        ".finished_counts"
    ).fetchall()
    for minute, queue, done, failed, total, most, buckets, counts in rows:
        was = out.get((minute, queue), (0, 0, 0.0, 0.0, Counter()))
        histogram = Counter(dict(zip(buckets, counts, strict=True)))
        out[(minute, queue)] = (was[0] + done, was[1] + failed, was[2] + total,
                                max(was[3], most), was[4] + histogram)  # fmt: skip
    return out


def same(got: dict[tuple[Any, str], Any], want: dict[tuple[Any, str], Any]) -> None:
    assert got.keys() == want.keys(), (got, want)
    for key, (done, failed, total, most, buckets) in want.items():
        assert got[key][:2] == (done, failed), key
        assert got[key][2:4] == pytest.approx((total, most)), key
        assert got[key][4] == buckets, key


def jobs(db: psycopg.Connection[Any], app: App, statuses: list[str], minutes_ago: list[int]) -> Any:
    """One job per wait of WAITS, in turn of each queue, status and minute given; each due at
    its minute's start, started its wait later, finished (unless running) 10 s into its minute.
    Returns (id, finish time, queue, status, wait, start) of each."""
    made = []
    for i, wait in enumerate(WAITS):
        queue, status = QUEUES[i % len(QUEUES)], statuses[i % len(statuses)]
        row = db.execute(
            f'INSERT INTO "{app.schema}".jobs (queue, task, payload, status, attempts, locked_by, '
            "run_at, locked_at, locked_until, finished_at) "
            "SELECT %(queue)s, 't', '{}', %(status)s, 1, 'w', m, "
            "m + make_interval(secs => %(wait)s), "
            "CASE WHEN %(status)s = 'running' THEN now() + interval '1 hour' END, "
            "CASE WHEN %(status)s <> 'running' THEN m + interval '10 s' END "
            "FROM (SELECT date_trunc('minute', now()) - make_interval(mins => %(ago)s) AS m) AS x "
            "RETURNING id, finished_at, locked_at",
            {"queue": queue, "status": status, "wait": wait,
             "ago": minutes_ago[i % len(minutes_ago)]},
        ).fetchone()  # fmt: skip
        assert row is not None
        made.append((row[0], row[1], queue, status, wait, row[2]))
    return made


def test_the_paths_are_every_statement_that_removes_jobs() -> None:
    """A new statement that removes jobs from the jobs table is a path these tests must cover."""
    removing = {name for name, s in statements().items()
                if re.search(r"DELETE FROM \{jobs\}", s.text)}  # fmt: skip
    assert removing == set(PATHS.values())


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_that_removes_finished_jobs_counts_exactly_those_it_removed(
    path: str, app: App, store: SyncStore, db: psycopg.Connection[Any], pg_dsn: str
) -> None:
    if path.startswith("completion"):
        made = jobs(db, app, ["running"], [0])
        with psycopg.connect(pg_dsn) as conn:
            now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            claims = [Claim(m[0], 1, "w", m[5]) for m in made]
            finish = store.job_delete_many if path.endswith("delete") else store.job_archive_many
            assert finish(conn, claims) == {m[0] for m in made}
            conn.commit()
        removed = [(now, queue, "done", wait) for _, _, queue, _, wait, _ in made]
    else:
        # Done, failed and cancelled jobs (not counted) of two minutes of the last hour, and of
        # over a day ago (not counted: past the charts' widest window).
        made = jobs(db, app, ["done", "failed", "cancelled"], [3, 5, 60 * 25])
        if path == "prune":
            pruned = app.sync_client.prune({"done": 60, "failed": 60, "cancelled": 60})
            assert sum(pruned.values()) == len(made)
        else:
            assert app.delete_jobs(older_than=60).deleted == len(made)
        removed = [(finished, queue, status, wait) for _, finished, queue, status, wait, _ in made]
    assert db.execute(f'SELECT count(*) FROM "{app.schema}".jobs').fetchone() == (0,)
    want = expected(removed)
    assert sum(d + f for d, f, *_ in want.values()) >= 4  # the test counts something
    same(counted(db, app.schema), want)


def test_the_roles_that_remove_finished_jobs_count_them_and_no_other_role_may(
    pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """finished_counts_add runs with its caller's rights, on a server where functions are not
    everyone's to execute: the worker (the outcomes of completion="delete" and "archive",
    pruning) and the admin (the bulk delete, pruning) count what they remove; the enqueuer and
    the viewer may not call it."""
    function = f'"{schema}".finished_counts_add(timestamptz[], text[], text[], float8[])'
    call = sql.SQL("SELECT {}(ARRAY[now()], ARRAY['q'], ARRAY['done'], ARRAY[0.5::float8])").format(
        sql.Identifier(schema, "finished_counts_add")
    )
    with role_logins(db, pg_dsn, schema) as roles:
        for kind in KINDS:
            may = db.execute(
                "SELECT has_function_privilege(%s, %s, 'EXECUTE')",
                [getattr(roles.names, kind), function],
            ).fetchone()
            assert may == (kind in ("worker", "admin"),), kind
        for kind in ("enqueuer", "viewer"):
            with (
                psycopg.connect(roles.dsn[kind], autocommit=True) as conn,
                pytest.raises(psycopg.errors.InsufficientPrivilege),
            ):
                conn.execute(call)
        for completion in ("delete", "archive"):
            worker = App(roles.dsn["worker"], schema, completion=completion)  # type: ignore[arg-type]
            try:
                worker.task(name="t", queue=completion)(lambda: None)
                worker.enqueue_many("t", [{}, {}])
                assert drain(worker).done == 2
            finally:
                worker.close()
        admin = App(roles.dsn["admin"], schema)
        try:
            admin.task(name="t", queue="admin")(lambda: None)
            ids = [admin.enqueue("t", {}).id for _ in range(3)]
            db.execute(
                f"UPDATE \"{schema}\".jobs SET status = 'done', attempts = 1, locked_at = now(), "
                "finished_at = now() - CASE WHEN id = %s THEN interval '10 s' "
                "ELSE interval '2 minutes' END WHERE id = ANY(%s)",
                [ids[0], ids],
            )
            assert admin.delete_jobs(queue="admin", finished_within=60).deleted == 1
            assert admin.sync_client.prune({"done": 60}) == {"done": 2}
        finally:
            admin.close()
    totals = db.execute(
        f'SELECT queue, sum(done)::int FROM "{schema}".finished_counts GROUP BY 1 ORDER BY 1'
    ).fetchall()
    assert totals == [("admin", 3), ("archive", 2), ("delete", 2)]
