"""One set of bounds, enforced twice: what enqueue refuses (with an error naming the limit,
nothing written) the jobs table refuses too (CHECK constraints ``jobs_bound_*``), and rows
that predate the constraints still show on every admin surface."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from helpers.bad_rows import insert_sql
from helpers.bad_rows import nested_payload as nested
from skiplock import App, InvalidName, InvalidPayload, Worker
from skiplock._cli.main import main as cli_main
from skiplock._db.bounds import (
    EARLIEST_TIME,
    LATEST_TIME,
    MAX_JSON_DEPTH,
    MAX_JSON_INT_DIGITS,
    MAX_KEY_LENGTH,
)
from skiplock._db.connections import translate


def count_jobs(db: psycopg.Connection[Any], schema: str) -> int:
    row = db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "jobs")))
    return int(row.fetchone()[0])  # type: ignore[index]


# -- finding 2: keys longer than an index row can hold ------------------------------------


def test_a_long_entity_key_is_refused_and_one_at_the_limit_still_runs(
    app: App, db: psycopg.Connection[Any]
) -> None:
    ran: list[str] = []

    @app.task(name="keyed")
    def keyed(n: int) -> None:
        ran.append(str(n))

    with pytest.raises(ValueError, match=f"entity_key.*{MAX_KEY_LENGTH} characters"):
        keyed.with_options(entity_key="k" * 3000).enqueue(n=0)
    with pytest.raises(ValueError, match=f"idempotency_key.*{MAX_KEY_LENGTH} characters"):
        keyed.with_options(idempotency_key="k" * 3000).enqueue(n=0)
    assert count_jobs(db, app.schema) == 0

    # The longest key, in 4-byte characters, fits the unique index a claim writes into.
    widest = "\U0001f600" * MAX_KEY_LENGTH
    keyed.with_options(entity_key=widest, idempotency_key=widest).enqueue(n=1)
    keyed.with_options(entity_key="other").enqueue(n=2)
    stats = asyncio.run(Worker(app, burst=True).run())
    assert (stats.done, stats.failed) == (2, 0) and sorted(ran) == ["1", "2"]


# -- finding 7: bad values are clear errors, nothing written -----------------------------

BAD_OPTIONS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"delay": 1e300}, ValueError, "9999"),
    ({"delay": 1e12}, ValueError, "9999"),
    ({"delay": True}, ValueError, "delay"),
    ({"delay": float("nan")}, ValueError, "delay"),
    ({"delay": timedelta(days=4_000_000)}, ValueError, "9999"),
    ({"run_at": "2030-01-01"}, ValueError, "run_at must be a datetime"),
    ({"run_at": datetime(2030, 1, 1)}, ValueError, "timezone-aware"),
    ({"run_at": datetime(9999, 12, 31, tzinfo=UTC)}, ValueError, "9999"),
    ({"run_at": datetime(1, 1, 1, tzinfo=UTC)}, ValueError, "0001"),
    ({"expires": 1e300}, ValueError, "9999"),
    ({"expires": datetime(9999, 12, 31, 12, tzinfo=UTC)}, ValueError, "9999"),
    ({"expires": "tomorrow"}, ValueError, "expires"),
    ({"idempotency_key": "\ud800"}, ValueError, "surrogate"),
    ({"entity_key": "a\x00b"}, ValueError, "NUL"),
    ({"idempotency_key": "a\x00b"}, ValueError, "NUL"),
    ({"entity_key": "k" * (MAX_KEY_LENGTH + 1)}, ValueError, str(MAX_KEY_LENGTH)),
    ({"depends_on": [2**63]}, ValueError, "depends_on"),
    ({"max_attempts": True}, ValueError, "max_attempts"),
    ({"priority": True}, ValueError, "priority"),
]


@pytest.mark.parametrize(("options", "error", "match"), BAD_OPTIONS)
def test_bad_options_are_clear_errors_on_every_enqueue_path(
    app: App,
    db: psycopg.Connection[Any],
    options: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    @app.task(name="opt")
    def opt(n: int = 0) -> None: ...

    calls: list[Callable[[], Any]] = [
        lambda: opt.with_options(**options).enqueue(),
        lambda: opt.with_options(**options).enqueue_many([{"n": 1}, {"n": 2}]),
        lambda: asyncio.run(opt.with_options(**options).enqueue_async()),
        lambda: asyncio.run(opt.with_options(**options).enqueue_many_async([{}, {}])),
        lambda: app.enqueue("opt", {"n": 1}, **options),
        lambda: app.enqueue_many("opt", [{"n": 1}], **options),
    ]
    for call in calls:
        with pytest.raises(error, match=match):
            call()
    assert count_jobs(db, app.schema) == 0


BAD_PAYLOADS: list[tuple[dict[str, Any], str]] = [
    (nested(3000), f"{MAX_JSON_DEPTH} levels"),
    (nested(500), f"{MAX_JSON_DEPTH} levels"),
    (nested(MAX_JSON_DEPTH + 1), f"{MAX_JSON_DEPTH} levels"),
    ({"a": [{"b": nested(MAX_JSON_DEPTH - 2)}]}, f"{MAX_JSON_DEPTH} levels"),
]


@pytest.mark.parametrize(("payload", "match"), BAD_PAYLOADS)
def test_deep_payloads_and_metas_are_refused_naming_the_limit(
    app: App, db: psycopg.Connection[Any], payload: dict[str, Any], match: str
) -> None:
    @app.task(name="deep")
    def deep(**kwargs: Any) -> None: ...

    calls: list[Callable[[], Any]] = [
        lambda: deep.enqueue(**payload),
        lambda: deep.enqueue_many([{"n": 1}] * 300 + [payload]),
        lambda: asyncio.run(deep.enqueue_async(**payload)),
        lambda: deep.with_options(meta=payload).enqueue(),
    ]
    for call in calls:
        with pytest.raises(InvalidPayload, match=match):
            call()
    assert count_jobs(db, app.schema) == 0


def test_payloads_at_the_limits_are_accepted(app: App, db: psycopg.Connection[Any]) -> None:
    @app.task(name="edge")
    def edge(**kwargs: Any) -> None: ...

    deepest = nested(MAX_JSON_DEPTH)
    widest = 10**MAX_JSON_INT_DIGITS - 1
    edge.enqueue(**deepest)
    edge.enqueue_many([{"n": i, **deepest} for i in range(300)])
    edge.with_options(meta=deepest).enqueue(big=widest)
    edge.with_options(run_at=LATEST_TIME).enqueue()
    edge.with_options(run_at=EARLIEST_TIME).enqueue()
    assert count_jobs(db, app.schema) == 304
    with pytest.raises(InvalidPayload, match=f"{MAX_JSON_INT_DIGITS} digits"):
        edge.enqueue(big=widest + 1)


def test_cli_refuses_out_of_range_numbers_clearly(app: App, db: psycopg.Connection[Any]) -> None:
    runner = CliRunner()
    where = ["--dsn", app.dsn, "--schema", app.schema]
    for argv in (
        ["rate", "q", "999999999999/s"],
        ["limit", "q", "99999999999"],
        ["jobs", "list", "--before", str(10**20)],
    ):
        result = runner.invoke(cli_main, [*argv, *where])
        assert result.exit_code == 2, (argv, result.output, result.exception)
        assert "Invalid value" in result.output, result.output
    settings = db.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(app.schema, "queues"))
    ).fetchone()
    assert settings == (0,)
    with pytest.raises(ValueError, match="2147483647"):
        app.sync_client.set_concurrency_limit("q", 2**31)
    with pytest.raises(ValueError, match="before"):
        app.sync_client.list_jobs(before=2**63)


# -- the table: the same bounds, whoever inserts ------------------------------------------


def refused_by(db: psycopg.Connection[Any], schema: str, constraint: str, **columns: Any) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as info:
        insert_sql(db, schema, **columns)
    assert info.value.diag.constraint_name == constraint


def test_the_table_and_the_client_agree_on_every_bound(
    app: App, db: psycopg.Connection[Any]
) -> None:
    """Just over each limit is refused by the table (by the constraint named for it) and by
    enqueue; just under is accepted by both."""

    @app.task(name="t", queue="q")
    def t(**kwargs: Any) -> None: ...

    s = app.schema
    key = "\U0001f600" * MAX_KEY_LENGTH
    for column in ("entity_key", "idempotency_key"):
        insert_sql(db, s, **{column: key})
        t.with_options(**{column: key + "x"[:0]}).enqueue()
        refused_by(db, s, f"jobs_bound_{column}", **{column: key + "x"})
        refused_by(db, s, f"jobs_bound_{column}", **{column: ""})
        with pytest.raises(ValueError, match=f"{MAX_KEY_LENGTH} characters"):
            t.with_options(**{column: key + "x"}).enqueue()
        db.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(s, "jobs")))

    tick = timedelta(microseconds=1)
    for column, option in (("run_at", "run_at"), ("expires_at", "expires")):
        insert_sql(db, s, **{column: LATEST_TIME})
        if column == "run_at":
            insert_sql(db, s, run_at=EARLIEST_TIME)
        for bad in (LATEST_TIME + tick, "infinity", "-infinity", EARLIEST_TIME - tick):
            refused_by(db, s, f"jobs_bound_{column}", **{column: bad})
        with pytest.raises(ValueError, match="9999"):
            t.with_options(**{option: LATEST_TIME + tick}).enqueue()
    t.with_options(expires=LATEST_TIME).enqueue()

    for column in ("payload", "meta"):
        deepest = json.dumps(nested(MAX_JSON_DEPTH))
        insert_sql(db, s, **{column: deepest})
        insert_sql(db, s, **{column: '{"n": [' + "9" * MAX_JSON_INT_DIGITS + "]}"})
        insert_sql(db, s, **{column: '{"n": -' + "9" * MAX_JSON_INT_DIGITS + ".5}"})
        for bad in (
            json.dumps(nested(MAX_JSON_DEPTH + 1)),
            json.dumps({"a": {"b": nested(MAX_JSON_DEPTH - 1)}}),
            '{"n": 1' + "0" * MAX_JSON_INT_DIGITS + "}",
            '{"n": [-1' + "0" * MAX_JSON_INT_DIGITS + "]}",
            '{"n": 1e5000}',
        ):
            refused_by(db, s, f"jobs_bound_{column}", **{column: bad})

    t.with_options(queue="q" * 63).enqueue()
    with pytest.raises(InvalidName, match="1-63"):
        t.with_options(queue="q" * 64).enqueue()
    refused_by(db, s, "jobs_bound_queue", queue="q" * 64)
    refused_by(db, s, "jobs_bound_queue", queue="bad queue")
    insert_sql(db, s, queue="q" * 63)
    refused_by(db, s, "jobs_bound_task", task="t" * 201)
    refused_by(db, s, "jobs_bound_task", task="no spaces")
    insert_sql(db, s, task="t" * 200)
    with pytest.raises(psycopg.errors.CheckViolation):
        insert_sql(db, s, max_attempts=0)


def test_a_row_the_table_refuses_is_an_invalid_payload_naming_the_bound(
    app: App, db: psycopg.Connection[Any]
) -> None:
    """Should a row get past the client's checks (another producer's, or a delay that lands
    past the bound by the server's clock only), the table's refusal reads as what it is."""
    with pytest.raises(psycopg.errors.CheckViolation) as info:
        insert_sql(db, app.schema, run_at="infinity")
    error = translate(info.value, app.schema)
    assert isinstance(error, InvalidPayload)
    assert "jobs_bound_run_at" in str(error) and "9999" in str(error)
