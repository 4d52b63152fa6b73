"""Rows a worker cannot run, written by SQL past the client's checks: a payload it cannot
decode, a time Python cannot hold, a task it does not know, arguments that do not bind.  Each
fails its own job at once, final, saying what is wrong, and the jobs claimed with it run as
if it were not there; in both worker models, and the worker lives on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from helpers.bad_rows import UNDECODABLE_DEPTH, insert_row, job_state, nested
from helpers.stores import SyncStore
from skiplock import App, JobStatus, Worker
from skiplock._task_settings import WorkerModel
from skiplock.job import UnrunnableJob

GOOD = 9  # good jobs claimed together with the poison row
RUN_TIMEOUT = 60.0  # seconds a burst worker gets; a poisoned one used to hang or die


# What makes each row unrunnable, and what its job's last_error must say.
POISONS: dict[str, tuple[dict[str, Any], str]] = {
    "payload nested too deep": (
        {"payload": nested(UNDECODABLE_DEPTH)},
        "payload could not be decoded",
    ),
    "payload integer too long": (
        {"payload": '{"n": ' + "7" * 5000 + "}"},
        "payload could not be decoded",
    ),
    "run_at -infinity": ({"run_at": "-infinity"}, "run_at is -infinity"),
    "run_at infinity": ({"run_at": "infinity"}, "run_at is infinity"),
    "run_at after year 9999": ({"run_at": "12000-01-01"}, "run_at is after year 9999"),
    "expires_at infinity": ({"expires_at": "infinity"}, "expires_at is infinity"),
    "created_at -infinity": ({"created_at": "-infinity"}, "created_at is -infinity"),
    "meta nested too deep": ({"meta": nested(UNDECODABLE_DEPTH)}, "meta could not be decoded"),
}


def poison_row(db: psycopg.Connection[Any], schema: str, kind: str, task: str) -> int:
    columns, _ = POISONS[kind]
    columns = {"payload": '{"n": 0}', **columns}
    return insert_row(db, schema, task, **columns)


def burst(app: App, model: WorkerModel, **options: Any) -> Any:
    worker = Worker(app, burst=True, model=model, poll_interval=0.2, **options)
    return asyncio.run(asyncio.wait_for(worker.run(), RUN_TIMEOUT))


def status_of(app: App, job_id: int) -> tuple[JobStatus, int, str]:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        status, attempts, error = job_state(conn, app.schema, job_id)
    return JobStatus(status), attempts, error


def register(app: App, model: WorkerModel, ran: list[int]) -> Callable[..., Any]:
    @app.task(name="work", queue="q", model=model, max_attempts=3)
    def work(n: int) -> None:
        ran.append(n)

    return work


@pytest.mark.parametrize("model", ["lease", "held"])
@pytest.mark.parametrize("kind", list(POISONS))
def test_a_poison_row_fails_alone_and_its_batch_runs(
    app: App, db: psycopg.Connection[Any], model: WorkerModel, kind: str
) -> None:
    ran: list[int] = []
    work = register(app, model, ran)
    bad = poison_row(db, app.schema, kind, "work")  # first in claim order, in the first batch
    good = [work.enqueue(n=n).id for n in range(1, GOOD + 1)]  # type: ignore[attr-defined]

    stats = burst(app, model, concurrency=4)

    assert sorted(ran) == list(range(1, GOOD + 1))  # each good job ran once
    assert {status_of(app, i)[0] for i in good} == {JobStatus.DONE}
    status, attempts, error = status_of(app, bad)
    assert (status, attempts) == (JobStatus.FAILED, 1)  # at once, not after its retries
    assert POISONS[kind][1] in error and "not run" in error
    assert "lease" not in error
    assert (stats.done, stats.failed) == (GOOD, 1)


@pytest.mark.parametrize("model", ["lease", "held"])
def test_several_poison_rows_in_one_claim_each_fail_alone(
    app: App, db: psycopg.Connection[Any], model: WorkerModel
) -> None:
    ran: list[int] = []
    work = register(app, model, ran)
    bad = [poison_row(db, app.schema, kind, "work") for kind in POISONS]
    good = [work.enqueue(n=n).id for n in range(1, GOOD + 1)]  # type: ignore[attr-defined]

    stats = burst(app, model, concurrency=4)

    assert sorted(ran) == list(range(1, GOOD + 1))
    assert {status_of(app, i)[0] for i in good} == {JobStatus.DONE}
    for kind, job_id in zip(POISONS, bad, strict=True):
        status, attempts, error = status_of(app, job_id)
        assert (status, attempts) == (JobStatus.FAILED, 1), kind
        assert POISONS[kind][1] in error, kind
    assert (stats.done, stats.failed) == (GOOD, len(POISONS))


@pytest.mark.parametrize("model", ["lease", "held"])
def test_a_poison_row_in_a_claim_across_queues_and_in_a_limited_queue(
    app: App, db: psycopg.Connection[Any], model: WorkerModel
) -> None:
    """The claim across several queues (a held-lock worker's picks candidates first, then
    claims each by id) and the claim of a queue with a concurrency limit read rows the same
    way."""
    ran: list[int] = []
    work = register(app, model, ran)

    @app.task(name="other", queue="r", model=model, max_attempts=3)
    def other(n: int) -> None:
        ran.append(n)

    @app.task(name="capped", queue="c", model=model, max_attempts=3)
    def capped(n: int) -> None:
        ran.append(n)

    app.sync_client.set_concurrency_limit("c", 2)
    bad = [
        poison_row(db, app.schema, "run_at -infinity", "work"),
        insert_row(db, app.schema, "other", nested(UNDECODABLE_DEPTH), queue="r"),
        insert_row(db, app.schema, "capped", '{"n": 0}', queue="c", run_at="infinity"),
    ]
    work.enqueue_many([{"n": n} for n in range(1, 4)])  # type: ignore[attr-defined]
    other.enqueue_many([{"n": n} for n in range(4, 7)])
    capped.enqueue_many([{"n": n} for n in range(7, 10)])

    stats = burst(app, model, concurrency=4)

    assert sorted(ran) == list(range(1, 10))
    assert [status_of(app, i)[:2] for i in bad] == [(JobStatus.FAILED, 1)] * 3
    assert (stats.done, stats.failed) == (9, 3)


def test_the_sync_store_claims_a_poison_row_with_the_rest(
    app: App, store: SyncStore, db: psycopg.Connection[Any]
) -> None:
    """The store's claim (and its generated sync twin) hands back every claimed row: one it
    cannot read comes back as a job that says why, not as an error that loses the batch."""

    @app.task(name="work", queue="q")
    def work(n: int) -> None: ...

    bad = poison_row(db, app.schema, "run_at -infinity", "work")
    deep = poison_row(db, app.schema, "payload nested too deep", "work")
    good = [work.enqueue(n=n).id for n in range(3)]
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        jobs = store.job_claim(conn, ["q"], 10, "w1", 30.0)
    assert sorted(j.id for j in jobs) == sorted([bad, deep, *good])
    reasons = {j.id: j.reason for j in jobs if isinstance(j, UnrunnableJob)}
    assert set(reasons) == {bad, deep}
    assert reasons[bad].startswith("run_at is -infinity")
    assert reasons[deep].startswith("payload could not be decoded")


# -- unknown tasks --------------------------------------------


@pytest.mark.parametrize("model", ["lease", "held"])
def test_an_unknown_task_fails_at_once_and_final(
    app: App, db: psycopg.Connection[Any], model: WorkerModel
) -> None:
    ran: list[int] = []
    work = register(app, model, ran)
    ghost = insert_row(db, app.schema, "ghost", "{}")
    good = [work.enqueue(n=n).id for n in range(1, GOOD + 1)]  # type: ignore[attr-defined]

    stats = burst(app, model, concurrency=4)

    assert sorted(ran) == list(range(1, GOOD + 1))
    assert {status_of(app, i)[0] for i in good} == {JobStatus.DONE}
    status, attempts, error = status_of(app, ghost)
    assert (status, attempts) == (JobStatus.FAILED, 1)
    assert error.startswith("UnknownTask: unknown task 'ghost'")
    assert "not retried" in error
    assert (stats.done, stats.failed, stats.retried) == (GOOD, 1, 0)


@pytest.mark.parametrize("model", ["lease", "held"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync task", "async task"])
@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("{}", "missing a required argument: 'n'"),
        ('{"n": 1, "m": 2}', "got an unexpected keyword argument 'm'"),
        ('{"m": 2}', "missing a required argument: 'n'"),
        ("[1]", "the payload is not a JSON object"),
    ],
)
def test_arguments_that_do_not_bind_fail_at_once_and_final(
    app: App,
    db: psycopg.Connection[Any],
    model: WorkerModel,
    is_async: bool,
    payload: str,
    reason: str,
) -> None:
    ran: list[int] = []
    if is_async:

        @app.task(name="work", queue="q", model=model, max_attempts=3)
        async def work_async(n: int) -> None:
            ran.append(n)

    else:
        register(app, model, ran)
    bad = insert_row(db, app.schema, "work", payload)
    good = [app.enqueue("work", {"n": n}).id for n in range(1, GOOD + 1)]

    stats = burst(app, model, concurrency=4)

    assert sorted(ran) == list(range(1, GOOD + 1))
    assert {status_of(app, i)[0] for i in good} == {JobStatus.DONE}
    status, attempts, error = status_of(app, bad)
    assert (status, attempts) == (JobStatus.FAILED, 1)
    assert error.startswith("TypeError: ")
    assert f"not retried: the payload does not match the parameters of task 'work' ({reason})" in (
        error
    )
    assert (stats.done, stats.failed, stats.retried) == (GOOD, 1, 0)


@pytest.mark.parametrize("model", ["lease", "held"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync task", "async task"])
def test_a_type_error_inside_the_task_is_retried(
    app: App, model: WorkerModel, is_async: bool
) -> None:
    """Only arguments that do not bind fail at once: a TypeError the task raises itself is an
    ordinary failure, retried while attempts are left."""

    def body(n: int) -> None:
        raise TypeError(f"unsupported operand for {n}")

    if is_async:

        @app.task(name="typo", queue="q", model=model, max_attempts=3)
        async def typo_async(n: int) -> None:
            body(n)

    else:

        @app.task(name="typo", queue="q", model=model, max_attempts=3)
        def typo(n: int) -> None:
            body(n)

    job_id = app.enqueue("typo", {"n": 1}).id
    stats = burst(app, model)
    status, attempts, error = status_of(app, job_id)
    assert status in (JobStatus.SCHEDULED, JobStatus.PENDING) and attempts == 1
    assert error.startswith("TypeError: unsupported operand for 1")
    assert "not retried" not in error
    assert stats.retried == 1


def test_a_payload_nested_just_under_the_limit_still_runs(
    app: App, db: psycopg.Connection[Any]
) -> None:
    """The decode is guarded, not limited: what Python can decode reaches the task."""
    depths: list[int] = []

    @app.task(name="deep", queue="q")
    def deep(n: Any) -> None:
        depth = 0
        while isinstance(n, list) and n:
            n, depth = n[0], depth + 1
        depths.append(depth)

    payload = json.dumps({"n": json.loads("[" * 100 + "]" * 100)})
    insert_row(db, app.schema, "deep", payload)
    stats = burst(app, "lease")
    assert stats.done == 1 and depths == [99]
