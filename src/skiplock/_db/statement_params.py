"""Parameters of the store's statements that name claims or claim jobs: pure, no I/O.

Kept apart from the store, whose sync twin is generated from the async one, so that they exist
once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from skiplock._db.records import ProgressReport, TaskResult
from skiplock._db.sql import SMALL_CLAIM, literal_limit_name
from skiplock.job import Claim, ClaimKey, Job

_NO_KEY = (None, None, None)  # read the claim index from its start


def claim_arrays(claims: Sequence[Claim]) -> dict[str, Any]:
    """The claims of one worker as the parameters of a write that names them (see jobs.sql):
    ids, attempts, and each claim's time as its place (1-based) in the batch's distinct claim
    times, which are few (the jobs of one claim statement share its time)."""
    workers = {c.worker for c in claims}
    if len(workers) > 1:
        raise ValueError("a batch of finishes must come from one worker")
    places: dict[datetime, int] = {}
    for claim in claims:
        places.setdefault(claim.claimed_at, len(places) + 1)
    return {
        "ids": int_array([c.job_id for c in claims]),
        "attempts": int_array([c.attempt for c in claims]),
        "claim_time_index": int_array([places[c.claimed_at] for c in claims]),
        "claim_times": list(places),
        "worker": workers.pop() if workers else "",
    }


def result_arrays(results: Sequence[TaskResult]) -> dict[str, Any]:
    """The claims of done jobs and what their tasks returned (JSON text), as parallel arrays."""
    return {**claim_arrays([r.claim for r in results]), "results": [r.result for r in results]}


def progress_arrays(reports: Sequence[ProgressReport]) -> dict[str, Any]:
    """The fractions and statuses of progress reports, as parallel arrays."""
    return {"progress": [r.progress for r in reports], "status": [r.status for r in reports]}


def int_array(values: Sequence[int]) -> str:
    """A PostgreSQL array literal of integers, for a parameter cast to ``bigint[]``/``int[]``.
    psycopg would dump a list element by element in Python; joining their text is cheaper
    (docs/design.md, "Integer arrays as literal text")."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def claim_statement(
    queues: Sequence[str],
    limit: int,
    worker: str,
    lease_seconds: float,
    after: Mapping[str, ClaimKey] | None,
    *,
    schema: str,
    held: bool = False,
    weights: Mapping[str, int] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The claim statement for ``queues`` and its parameters; a small claim's LIMIT is written
    into its statement (see SMALL_CLAIM).  A leased claim's transaction commits without waiting
    for the WAL flush; a ``held`` claim's (one queue: a held-lock slot's) does not, and takes
    the held-lock markers of the queue and of the job (see job_claim in jobs.sql)."""
    if held and len(queues) != 1:
        raise ValueError("a held-lock claim is from one queue")
    params: dict[str, Any] = {
        "worker": worker,
        "lease_seconds": lease_seconds,
        "commit_async": not held,
        "held_marker": held,
        "schema": schema,
    }
    keys = [(after or {}).get(q, _NO_KEY) for q in queues]
    if len(queues) == 1:
        name = "job_claim"
        params["queue"] = queues[0]
        params["after_priority"], params["after_run_at"], params["after_id"] = keys[0]
    else:
        name = "job_claim_from_queues"
        params["queues"] = list(queues)
        params["after_priority"] = [k[0] for k in keys]
        params["after_run_at"] = [k[1] for k in keys]
        params["after_id"] = [k[2] for k in keys]
        params["weights"] = [(weights or {}).get(q, 1) for q in queues]
    if limit <= SMALL_CLAIM:
        return literal_limit_name(name, limit), params
    params["limit"] = limit
    return name, params


def in_turns(
    jobs: Sequence[Job], queues: Sequence[str], weights: Mapping[str, int] | None = None
) -> list[Job]:
    """Claimed jobs in the order a claim across ``queues`` took them: best priority then oldest
    first in each queue, the queues taking turns in the order given, each as many as its weight
    (docs/design.md, "Fair shares: queues take turns")."""
    ordered = sorted(jobs, key=lambda j: (j.priority, j.run_at, j.id))
    if len(queues) < 2:
        return ordered
    place = {q: i for i, q in enumerate(queues)}
    seen: dict[str, int] = {}
    turns = []
    for job in ordered:
        turn = seen.get(job.queue, 0)
        seen[job.queue] = turn + 1
        weight = (weights or {}).get(job.queue, 1)
        turns.append((turn / weight, place.get(job.queue, len(place)), job))
    return [job for _, _, job in sorted(turns, key=lambda t: (t[0], t[1]))]
