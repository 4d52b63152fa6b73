"""The claim's query plan with a big history: it reads the partial claim index, never the table.

100k finished rows and ~1k pending ones, analyzed; then the exact claim statements are
EXPLAINed (plain EXPLAIN does not run the UPDATE) with literal parameters, as a prepared
statement's generic plan, and once with ANALYZE inside a rolled-back transaction.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import ClientCursor

from helpers.plans import explain, explain_generic, nodes
from helpers.stores import sync_store
from skiplock import App, Job
from skiplock._db.sql import SMALL_CLAIM

QUEUES = ["default", "mail", "reports"]
DONE_ROWS = 100_000
PENDING_ROWS = 1_000


def fill_history(conn: psycopg.Connection[Any], jobs: str) -> None:
    conn.execute(
        f"""
        INSERT INTO {jobs} (queue, task, payload, status, run_at, attempts, locked_by,
                            entity_key, created_at, finished_at)
        SELECT (%(queues)s::text[])[1 + g %% 3], 'task', jsonb_build_object('n', g), 'done',
               now() - make_interval(secs => g), 1, 'old-worker',
               CASE WHEN g %% 4 = 0 THEN 'customer-' || g %% 50 END,
               now() - make_interval(secs => g), now() - make_interval(secs => g)
        FROM generate_series(1, {DONE_ROWS}) AS g
        """,
        {"queues": QUEUES},
    )
    conn.execute(
        f"""
        INSERT INTO {jobs} (queue, task, payload, status, priority, run_at, entity_key)
        SELECT (%(queues)s::text[])[1 + g %% 3], 'task', jsonb_build_object('n', g), 'pending',
               g %% 3, now() - make_interval(secs => g),
               CASE WHEN g %% 5 = 0 THEN 'customer-' || g %% 50 END
        FROM generate_series(1, {PENDING_ROWS}) AS g
        """,
        {"queues": QUEUES},
    )
    # A few running jobs, so the entity-key check has something to look at.
    conn.execute(
        f"UPDATE {jobs} SET status = 'running', attempts = 1, locked_by = 'w0', "
        "locked_until = now() + interval '1 minute' "
        f"WHERE id IN (SELECT id FROM {jobs} WHERE status = 'pending' AND entity_key IS NOT NULL "
        "ORDER BY id LIMIT 3)"
    )
    conn.execute(f"ANALYZE {jobs}")


@contextmanager
def filled_schema(
    pg_dsn: str, prefix: str, fill: Callable[[psycopg.Connection[Any], str], None]
) -> Iterator[App]:
    """An app on a new migrated schema whose jobs table ``fill`` filled (given a connection and
    the table's quoted name); the schema is dropped afterwards."""
    application = App(pg_dsn, f"{prefix}_{secrets.token_hex(5)}")
    application.migrate()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            fill(conn, f'"{application.schema}".jobs')
        yield application
    finally:
        application.sync_client.drop_schema()
        application.close()


@pytest.fixture(scope="module")
def app(pg_dsn: str) -> Iterator[App]:
    """One schema with the big history for the whole module (the tests only EXPLAIN, or
    EXPLAIN ANALYZE in a rolled-back transaction, so they leave it as it was)."""
    with filled_schema(pg_dsn, "plan", fill_history) as application:
        yield application


@pytest.fixture
def big_history(app: App, db: Any) -> str:
    jobs = f'"{app.schema}".jobs'
    # Every test starts from (and must leave) the same state.
    assert db.execute(f"SELECT status, count(*) FROM {jobs} GROUP BY 1 ORDER BY 1").fetchall() == [
        ("done", DONE_ROWS),
        ("pending", PENDING_ROWS - 3),
        ("running", 3),
    ]
    return jobs


@pytest.fixture
def literal_conn(app: App) -> Iterator[psycopg.Connection[Any]]:
    """Parameters inlined client-side: EXPLAIN sees literal values."""
    with psycopg.connect(app.dsn, autocommit=True, cursor_factory=ClientCursor) as conn:
        yield conn


def claim_params(limit: int = 10) -> dict[str, Any]:
    """A claim from the lowest key (the whole index), as a worker's first claim."""
    return {
        "queue": "mail",
        "limit": limit,
        "worker": "w1",
        "lease_seconds": 30.0,
        "commit_async": True,
        "held_marker": False,
        "schema": "s",
        "after_priority": None,
        "after_run_at": None,
        "after_id": None,
    }


def from_queues_params(limit: int = 10) -> dict[str, Any]:
    return {
        "queues": QUEUES,
        "limit": limit,
        "worker": "w1",
        "lease_seconds": 30.0,
        "commit_async": True,
        "held_marker": False,
        "schema": "s",
        "after_priority": [None] * len(QUEUES),
        "after_run_at": [None] * len(QUEUES),
        "after_id": [None] * len(QUEUES),
        "weights": [1] * len(QUEUES),
    }


def index_scans(plan: dict[str, Any], index: str) -> list[dict[str, Any]]:
    return [
        n
        for n in nodes(plan)
        if n["Node Type"] in ("Index Scan", "Index Only Scan") and n.get("Index Name") == index
    ]


def claim_index_scans(plan: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two reads of the claim index: better priorities than the key, then after the key."""
    scans = index_scans(plan, "jobs_claim_idx")
    assert len(scans) == 2, f"expected two scans of jobs_claim_idx, plan: {json.dumps(plan)}"
    better, after = scans
    assert "priority <" in better["Index Cond"]
    assert "ROW(priority, run_at, id) >" in after["Index Cond"]
    return better, after


def buffers(node: dict[str, Any]) -> int:
    return int(node["Shared Hit Blocks"] + node["Shared Read Blocks"])


def seq_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in nodes(plan) if n["Node Type"] == "Seq Scan"]


def cte(plan: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [n for n in nodes(plan) if n.get("Subplan Name") == f"CTE {name}"]
    return found


def locking_buffers(plan: dict[str, Any]) -> int:
    return sum(buffers(cte(plan, name)) for name in ("better", "after"))


def sort_inputs(plan: dict[str, Any]) -> list[str]:
    """What each Sort node of the plan sorts (by its child's node type)."""
    return [
        child["Node Type"] for n in nodes(plan) if n["Node Type"] == "Sort" for child in n["Plans"]
    ]


def assert_single_queue_claim_plan(plan: dict[str, Any]) -> None:
    root = plan["Plan"]
    assert seq_scans(root) == [], "the claim scans a table sequentially"
    for scan, name in zip(claim_index_scans(root), ("better", "after"), strict=True):
        assert scan["Relation Name"] == "jobs"
        # The index supplies the claim order: nothing that reads it sorts.
        assert scan in list(nodes(cte(root, name)))
        assert [n for n in nodes(cte(root, name)) if "Sort" in n["Node Type"]] == []
    # Two sorts, neither of them of a table or index read: one puts the two reads' locked rows
    # (at most twice the limit) together, one orders the claimed rows that have an entity key
    # (at most the limit) by key to keep the first of each; rows without a key are not sorted.
    assert sorted(sort_inputs(root)) == ["Append", "CTE Scan"]
    (keyed,) = [
        child
        for n in nodes(root)
        if n["Node Type"] == "Sort"
        for child in n["Plans"]
        if child["Node Type"] == "CTE Scan"
    ]
    assert keyed["CTE Name"] == "locked"
    assert keyed["Filter"] == "(entity_key IS NOT NULL)"


def test_claim_reads_the_partial_index_without_seq_scan_or_sort(
    app: App, big_history: str, literal_conn: psycopg.Connection[Any], db: Any
) -> None:
    plan = explain(literal_conn, app.queries["job_claim"], claim_params(), "")
    assert_single_queue_claim_plan(plan)
    # Plain EXPLAIN planned the UPDATE without running it.
    assert db.execute(
        f"SELECT count(*) FROM {big_history} WHERE status = 'running'"
    ).fetchone() == (3,)


@pytest.mark.parametrize("statement", ["job_claim", "job_claim_limit_10"])
def test_claim_generic_plan_of_the_prepared_statement_uses_the_index(
    app: App, big_history: str, literal_conn: psycopg.Connection[Any], statement: str
) -> None:
    """psycopg prepares a statement run often; its generic plan must be as good."""
    plan = explain_generic(literal_conn, app.queries[statement], claim_params(), "")
    assert_single_queue_claim_plan(plan)


def test_claim_touches_few_buffers_compared_to_the_table(
    app: App, big_history: str, literal_conn: psycopg.Connection[Any], db: Any
) -> None:
    (pages,) = db.execute(
        "SELECT relpages FROM pg_class WHERE oid = %s::regclass", (big_history,)
    ).fetchone()
    assert pages > 500  # the history is big enough for a full scan to show
    with literal_conn.transaction(force_rollback=True):
        plan = explain(literal_conn, app.queries["job_claim"], claim_params(), "ANALYZE, BUFFERS,")
    root = plan["Plan"]
    assert root["Actual Rows"] == 10  # it did claim (then rolled back)
    better, after = claim_index_scans(root)
    assert (better["Actual Rows"], after["Actual Rows"]) == (0, 10)  # no key: all are "after"
    # Finding and locking the 10 jobs reads a handful of index and heap pages; the whole
    # statement (with the updates of 10 rows and their index entries) stays far below a scan.
    found = locking_buffers(root)
    assert found < pages / 20, f"finding 10 jobs touched {found} of {pages} pages"
    assert buffers(root) < pages / 5, f"claiming 10 jobs touched {buffers(root)} of {pages} pages"
    # Rolled back: nothing was claimed.
    assert db.execute(
        f"SELECT count(*) FROM {big_history} WHERE status = 'running'"
    ).fetchone() == (3,)


def test_claim_from_several_queues_reads_the_index_once_per_queue(
    app: App, big_history: str, literal_conn: psycopg.Connection[Any], db: Any
) -> None:
    limit = 10
    plan = explain(literal_conn, app.queries["job_claim_from_queues"], from_queues_params(), "")
    root = plan["Plan"]
    assert seq_scans(root) == []
    # The scans are parameterized by the queue name and key (nested loop over the queues).
    for claim_scan in claim_index_scans(root):
        assert "(queue = q.name)" in claim_scan["Index Cond"]

    for _ in range(2):
        # The second run is measured: the first plans the queries of the entity-key functions
        # for the session, whose reads (catalog and index metapages, one more per index on jobs)
        # land in the claim's scan; a worker pays them once.
        with literal_conn.transaction(force_rollback=True):
            analyzed = explain(
                literal_conn,
                app.queries["job_claim_from_queues"],
                from_queues_params(limit),
                "ANALYZE, BUFFERS,",
            )
    root = analyzed["Plan"]
    assert seq_scans(root) == []
    for claim_scan in claim_index_scans(root):
        assert claim_scan["Actual Loops"] == len(QUEUES)
    # Each queue's scan stops after its best rows; sorts see at most limit * queues rows.
    for node in nodes(root):
        if node["Node Type"] == "Sort":
            assert node["Actual Rows"] <= limit * len(QUEUES)
    (pages,) = db.execute(
        "SELECT relpages FROM pg_class WHERE oid = %s::regclass", (big_history,)
    ).fetchone()
    found = buffers(cte(root, "locked"))
    assert found < pages / 20, f"finding jobs in {len(QUEUES)} queues touched {found} pages"
    assert buffers(root) < pages / 5


def fill_due_only(conn: psycopg.Connection[Any], jobs: str) -> None:
    conn.execute(
        f"INSERT INTO {jobs} (queue, task, payload) "
        "SELECT 'mail', 'task', jsonb_build_object('n', g) FROM generate_series(1, 10000) g"
    )
    conn.execute(f"VACUUM ANALYZE {jobs}")


@pytest.fixture(scope="module")
def due_only(pg_dsn: str) -> Iterator[App]:
    """10,000 due jobs in one queue and nothing else (the benchmark's 'due jobs only' table).
    A limit the planner cannot see made it expect a tenth of them claimed, and join those to
    the table by a sequential scan: 3.3 ms a claim instead of 0.3."""
    with filled_schema(pg_dsn, "plan_due", fill_due_only) as application:
        yield application


# Claims with the LIMIT as a parameter run custom plans (see the header of jobs.sql); the generic
# plan of the claim from one queue is checked as well, as the tests above do.  The small claims,
# whose LIMIT is written into the statement, do run their generic plans: those are checked too.
@pytest.mark.parametrize(
    ("statement", "plan_kind"),
    [
        ("job_claim", "literal"),
        ("job_claim", "generic"),
        ("job_claim_from_queues", "literal"),
        ("job_claim_limit_1", "generic"),
        ("job_claim_limit_10", "generic"),
        ("job_claim_from_queues_limit_1", "generic"),
        ("job_claim_from_queues_limit_10", "generic"),
    ],
)
def test_claimed_rows_are_updated_by_primary_key_however_many_are_due(
    due_only: App, statement: str, plan_kind: str
) -> None:
    from_queues = statement.startswith("job_claim_from_queues")
    params = from_queues_params() if from_queues else claim_params()
    with psycopg.connect(due_only.dsn, autocommit=True, cursor_factory=ClientCursor) as conn:
        how = explain if plan_kind == "literal" else explain_generic
        root = how(conn, due_only.queries[statement], params, "")["Plan"]
    assert seq_scans(root) == [], json.dumps(root)
    assert root["Node Type"] == "ModifyTable"
    (target,) = [n for n in root["Plans"] if n.get("Parent Relationship") != "InitPlan"]
    assert index_scans(target, "jobs_pkey"), json.dumps(root)
    if not from_queues:
        assert_single_queue_claim_plan({"Plan": root})


RUNNING_KEYED = 5_000
ENTITY_KEY = [f.name for f in dataclasses.fields(Job)].index("entity_key")  # in a claimed row


def fill_keyed(conn: psycopg.Connection[Any], jobs: str) -> None:
    conn.execute(
        f"INSERT INTO {jobs} (queue, task, payload, entity_key) "
        "SELECT 'other', 'task', '{}', 'busy-' || g "
        f"FROM generate_series(1, {RUNNING_KEYED}) AS g"
    )
    conn.execute(
        f"INSERT INTO {jobs} (queue, task, payload, run_at, entity_key) "
        "SELECT 'mail', 'task', jsonb_build_object('n', g), "
        "       now() - interval '1 hour' + make_interval(secs => g), "
        "       CASE g % 3 WHEN 0 THEN 'busy-' || g WHEN 1 THEN 'pair-' || g / 6 "
        "                  ELSE 'own-' || g END "
        "FROM generate_series(1, 1500) AS g"
    )
    conn.execute(f"VACUUM ANALYZE {jobs}")
    conn.execute(
        f"UPDATE {jobs} SET status = 'running', attempts = 1, locked_by = 'w0', "
        "locked_until = now() + interval '1 hour' WHERE queue = 'other'"
    )


@pytest.fixture(scope="module")
def keyed(pg_dsn: str) -> Iterator[App]:
    """1,500 pending keyed jobs in claim order (a third whose key is running, a third sharing
    their key in pairs, a third with keys of their own) and 5,000 running jobs, each with its
    own key, that statistics last saw pending (as after a burst of claims: the planner then
    expects hardly any running job)."""
    with filled_schema(pg_dsn, "plan_keyed", fill_keyed) as application:
        yield application


def rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of tables and indexes returned, over all their loops (what runs
    inside a function the plan calls is not part of the plan)."""
    return sum(
        int(n["Actual Rows"] * n["Actual Loops"])
        for n in nodes(plan)
        if n["Node Type"] in ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan")
    )


def test_keyed_claim_probes_running_keys_instead_of_reading_them_all(keyed: App) -> None:
    """A claim of keyed jobs checks each candidate's key with one probe of the unique index of
    running keys (a function).  As a subquery, the check was planned, when statistics showed
    few running jobs, as a hash of every running job's key built by every claim: 5,000 rows
    read here before a claim of one job could take it (4 ms instead of 0.3)."""
    for limit, taken in ((1, 1), (200, 150)):
        params = claim_params(limit)
        with psycopg.connect(keyed.dsn, autocommit=True, cursor_factory=ClientCursor) as conn:
            with conn.transaction(force_rollback=True):
                rows = conn.execute(keyed.queries["job_claim"], params).fetchall()
            with conn.transaction(force_rollback=True):
                plan = explain(conn, keyed.queries["job_claim"], params, "ANALYZE,")
        keys = [row[ENTITY_KEY] for row in rows]
        # The claim locks the first jobs whose key is not running (of the first 200: 100 with
        # keys of their own, 100 in pairs) and takes the first of each key.
        assert len(keys) == len(set(keys)) == taken
        assert not [k for k in keys if k.startswith("busy-")]
        # Rows read: the candidates (one in three skipped for a running key) and the claimed
        # rows by primary key; never the running jobs.
        read = rows_read(plan["Plan"])
        assert read < 3 * limit + 10, f"claiming {limit} read {read} rows: {json.dumps(plan)}"


def test_keyed_claim_keeps_the_first_job_of_each_key_in_claim_order(keyed: App) -> None:
    with (
        psycopg.connect(keyed.dsn, autocommit=True) as conn,
        conn.transaction(force_rollback=True),
    ):
        rows = conn.execute(keyed.queries["job_claim"], claim_params(30)).fetchall()
    claimed = sorted((json.loads(row[3])["n"], row[ENTITY_KEY]) for row in rows)  # payload as text

    # The fixture's pending jobs in claim order are n = 1..1500; the claim locks the first 30
    # whose key is not running and keeps the first job of each key among them.
    def key(n: int) -> str:
        return {0: f"busy-{n}", 1: f"pair-{n // 6}"}.get(n % 3, f"own-{n}")

    locked = [n for n in range(1, 1501) if not key(n).startswith("busy-")][:30]
    expected, seen = [], set()
    for n in locked:
        if key(n) not in seen:
            seen.add(key(n))
            expected.append((n, key(n)))
    assert claimed == expected


def test_small_claims_reuse_one_plan_and_big_ones_are_planned_each_time(due_only: App) -> None:
    """A claim of at most SMALL_CLAIM jobs runs a statement with its LIMIT written in, whose
    generic plan the server reuses once psycopg has prepared it; a bigger claim is planned for
    its parameters every time (see skiplock._db.sql.SMALL_CLAIM)."""
    store = sync_store(due_only)
    with psycopg.connect(due_only.dsn) as conn:  # one transaction, rolled back at the end
        for _ in range(15):
            assert len(store.job_claim(conn, ["mail"], 2, "w1", 30.0)) == 2
            big = SMALL_CLAIM + 1
            assert len(store.job_claim(conn, ["mail"], big, "w1", 30.0)) == big
        plans = conn.execute(
            "SELECT substring(statement from 'LIMIT (\\S+)'), generic_plans, custom_plans "
            "FROM pg_prepared_statements WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%' "
            "ORDER BY 1"
        ).fetchall()
        conn.rollback()
    (small,) = [p for p in plans if p[0] == "2"]
    (planned,) = [p for p in plans if p[0].startswith("$")]
    assert small[1] > 0, plans  # generic plans ran
    assert planned[1] == 0, plans  # always custom


@pytest.mark.parametrize("statement", ["job_next_due", "job_promote_due", "job_reclaim_expired"])
def test_due_work_reads_its_partial_index_not_the_table(
    app: App, big_history: str, literal_conn: psycopg.Connection[Any], statement: str
) -> None:
    """The leader reads the next run_at every 0.1 s and promotes (and every worker reclaims)
    in batches until none is due: each statement reads its partial index, in its custom plan
    and in the generic plan of the prepared statement."""
    index = "jobs_running_idx" if statement == "job_reclaim_expired" else "jobs_scheduled_idx"
    params = {"limit": 1000, "channel": "c", "now": None}
    plans = [explain(literal_conn, app.queries[statement], params, "")]
    if statement != "job_next_due":  # no parameter: its one plan is the generic one
        plans.append(explain_generic(literal_conn, app.queries[statement], params, ""))
    for plan in plans:
        assert seq_scans(plan["Plan"]) == [], json.dumps(plan)
        assert index_scans(plan["Plan"], index), json.dumps(plan)
