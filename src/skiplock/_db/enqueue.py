"""Turning an enqueue call into rows, and idempotency bookkeeping.  Pure, no I/O."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from skiplock._db.bounds import (
    check_delay,
    check_key,
    check_max_attempts,
    check_priority,
    check_queue_name,
    check_seconds_ahead,
    check_task_name,
    check_time,
)
from skiplock._db.payload import Default, encode_meta, encode_payload, encode_payloads
from skiplock.job import Enqueued


@dataclass(frozen=True)
class EnqueueOptions:
    """Per-job options of an enqueue; None means the task's default."""

    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    max_attempts: int | None = None
    entity_key: str | None = None
    idempotency_key: str | None = None
    meta: Mapping[str, Any] | None = None  # merged key by key, the later option's keys winning
    depends_on: Sequence[int | Enqueued] | None = None  # jobs (or their ids) to run after
    expires: float | timedelta | datetime | None = None  # seconds after the enqueue, or when
    fair_key: str | None = None  # the key whose jobs share the queue with other keys' jobs
    limit_key: str | None = None  # the key whose limits (App.set_key_limit) the job counts in

    def merged(self, other: EnqueueOptions) -> EnqueueOptions:
        """These options with every option ``other`` sets taking precedence."""
        if other is self or other == NO_OPTIONS:
            return self
        # Spelled out: this runs on every enqueue, and a loop over the fields costs more.
        return EnqueueOptions(
            self.queue if other.queue is None else other.queue,
            self.priority if other.priority is None else other.priority,
            self.run_at if other.run_at is None else other.run_at,
            self.delay if other.delay is None else other.delay,
            self.max_attempts if other.max_attempts is None else other.max_attempts,
            self.entity_key if other.entity_key is None else other.entity_key,
            self.idempotency_key if other.idempotency_key is None else other.idempotency_key,
            merged_meta(self.meta, other.meta),
            self.depends_on if other.depends_on is None else other.depends_on,
            self.expires if other.expires is None else other.expires,
            self.fair_key if other.fair_key is None else other.fair_key,
            self.limit_key if other.limit_key is None else other.limit_key,
        )


NO_OPTIONS = EnqueueOptions()


def merged_meta(
    first: Mapping[str, Any] | None, then: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """Two metas as one, the keys of ``then`` winning."""
    if not then:
        return first
    if not first:
        return then
    return {**first, **then}


MetaProvider = Callable[[], Mapping[str, Any] | None]


def with_provided_meta(
    options: EnqueueOptions, providers: Sequence[MetaProvider]
) -> EnqueueOptions:
    """``options`` with what the app's meta providers (:meth:`App.enqueue_meta`) give now
    under the meta it already has (an explicit key wins)."""
    provided: dict[str, Any] = {}
    for provider in providers:
        provided.update(provider() or {})
    return replace(options, meta=merged_meta(provided, options.meta))


@dataclass(frozen=True)
class NewJob:
    """One row to insert, already validated."""

    queue: str
    task: str
    payload: str
    priority: int
    run_at: datetime | None
    delay: float | None
    max_attempts: int
    entity_key: str | None
    idempotency_key: str | None
    meta: str | None = None  # JSON text
    depends_on: tuple[int, ...] | None = None  # job ids; None: depends on nothing
    expires_at: datetime | None = None  # an expiry given as a time ...
    expires_in: float | None = None  # ... or as seconds after the enqueue (the server's clock)
    fair_key: str | None = None
    limit_key: str | None = None


def check_expiry(
    expires: float | timedelta | datetime | None, delay: float | None, run_at: datetime | None
) -> tuple[datetime | None, float | None]:
    """(expires_at, expires_in): when a job not started yet is dropped, as a time or as seconds
    after the enqueue; refused when it would come before the job is even due (a time compared
    with a number of seconds by this machine's clock)."""
    if expires is None:
        return None, None
    if isinstance(expires, datetime):
        check_time(expires, "expires")
        due = run_at
        if due is None and delay is not None:
            due = datetime.now(UTC) + timedelta(seconds=delay)
        if due is not None and expires <= due:
            raise ValueError(f"expires ({expires}) must come after the job is due ({due})")
        return expires, None
    seconds = expires.total_seconds() if isinstance(expires, timedelta) else expires
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"expires must be seconds, a timedelta or a datetime, got {expires!r}")
    seconds = check_seconds_ahead(seconds, "expires", positive=True)
    if delay is not None and seconds <= delay:
        raise ValueError(f"expires ({seconds} s) must be longer than the delay ({delay} s)")
    if run_at is not None and run_at >= datetime.now(UTC) + timedelta(seconds=seconds):
        raise ValueError(f"expires ({seconds} s from now) must come after run_at ({run_at})")
    return None, float(seconds)


MAX_DEPENDENCIES = 1000


def check_dependencies(depends_on: Sequence[int | Enqueued] | None) -> tuple[int, ...] | None:
    """The ids of the jobs a new job depends on (each once, in order), from ids or what an
    enqueue returned; None for none."""
    if depends_on is None:
        return None
    if isinstance(depends_on, int | Enqueued) or not isinstance(depends_on, Sequence):
        raise ValueError("depends_on must be a list of job ids or of what enqueue returned")
    ids: dict[int, None] = {}
    for item in depends_on:
        job_id = item.id if isinstance(item, Enqueued) else item
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id < 2**63:
            raise ValueError(f"depends_on: {item!r} is not a job id (a positive 64-bit integer)")
        ids[job_id] = None
    if len(ids) > MAX_DEPENDENCIES:
        raise ValueError(f"depends_on: {len(ids)} jobs, at most {MAX_DEPENDENCIES}")
    return tuple(ids) or None


def check_options(task: str, options: EnqueueOptions) -> dict[str, Any]:
    """The row's columns but the payload, validated; options must be complete (queue, priority
    and max_attempts set)."""
    if options.run_at is not None and options.delay is not None:
        raise ValueError("give either run_at or delay, not both")
    if options.run_at is not None:
        check_time(options.run_at, "run_at")
    delay = options.delay
    if isinstance(delay, timedelta):
        delay = delay.total_seconds()
    delay = check_delay(delay)
    expires_at, expires_in = check_expiry(options.expires, delay, options.run_at)
    assert options.queue is not None and options.priority is not None
    assert options.max_attempts is not None
    return {
        "queue": check_queue_name(options.queue),
        "task": check_task_name(task),
        "priority": check_priority(options.priority),
        "run_at": options.run_at,
        "delay": delay,
        "max_attempts": check_max_attempts(options.max_attempts),
        "entity_key": check_key(options.entity_key, "entity_key"),
        "idempotency_key": check_key(options.idempotency_key, "idempotency_key"),
        "meta": encode_meta(options.meta, task=task),
        "depends_on": check_dependencies(options.depends_on),
        "expires_at": expires_at,
        "expires_in": expires_in,
        "fair_key": check_key(options.fair_key, "fair_key"),
        "limit_key": check_key(options.limit_key, "limit_key"),
    }


def build_job(
    task: str,
    payload: Mapping[str, Any],
    options: EnqueueOptions,
    *,
    max_payload_bytes: int,
    default: Default | None = None,
) -> NewJob:
    """Validate one job; options must be complete (queue, priority and max_attempts set).
    ``default`` encodes what JSON cannot hold (the task's serializer)."""
    columns = check_options(task, options)
    text = encode_payload(payload, max_bytes=max_payload_bytes, task=task, default=default)
    return NewJob(payload=text, **columns)


@dataclass(frozen=True)
class NewJobs:
    """The jobs of one enqueue call, validated: every column shared but the payload.

    ``payloads`` is a JSON array with one element per job, in order; ``first_payload`` the
    first element on its own ("" when there are no jobs).
    """

    queue: str
    task: str
    priority: int
    run_at: datetime | None
    delay: float | None
    max_attempts: int
    entity_key: str | None
    idempotency_key: str | None
    payloads: str
    count: int
    first_payload: str
    meta: str | None = None  # JSON text, shared by the jobs
    depends_on: tuple[int, ...] | None = None  # job ids, shared by the jobs
    expires_at: datetime | None = None
    expires_in: float | None = None
    fair_key: str | None = None
    limit_key: str | None = None

    @classmethod
    def repeated(cls, job: NewJob, count: int) -> NewJobs:
        """``count`` jobs just like ``job``."""
        columns = {name: value for name, value in vars(job).items() if name != "payload"}
        payloads = "[" + ",".join([job.payload] * count) + "]"
        first = job.payload if count else ""
        return cls(payloads=payloads, count=count, first_payload=first, **columns)

    def one_by_one(self) -> list[NewJob]:
        """The jobs as :class:`NewJob` rows, in order (for a backend without a batch form)."""
        columns = {
            name: value
            for name, value in vars(self).items()
            if name not in ("payloads", "count", "first_payload")
        }
        payloads = json.loads(self.payloads)
        return [NewJob(payload=json.dumps(p, separators=(",", ":")), **columns) for p in payloads]

    def params(self, channel: str) -> dict[str, Any]:
        """Parameters of ``job_insert_batch``, and of ``job_insert_one`` for the first job."""
        return {
            "queue": self.queue,
            "task": self.task,
            "priority": self.priority,
            "run_at": self.run_at,
            "delay": self.delay,
            "max_attempts": self.max_attempts,
            "entity_key": self.entity_key,
            "idempotency_key": self.idempotency_key,
            "meta": self.meta,
            "expires_at": self.expires_at,
            "expires_in": self.expires_in,
            "fair_key": self.fair_key,
            "limit_key": self.limit_key,
            "payloads": self.payloads,
            "payload": self.first_payload,
            "channel": channel,
        }


def build_jobs(
    task: str,
    payloads: Iterable[Mapping[str, Any]],
    options: EnqueueOptions,
    *,
    max_payload_bytes: int,
    default: Default | None = None,
) -> NewJobs:
    """Validate the jobs of one call: the options once, then every payload (``default``
    encodes what JSON cannot hold: the task's serializer)."""
    columns = check_options(task, options)
    listed = payloads if isinstance(payloads, list) else list(payloads)
    limit = max_payload_bytes
    if len(listed) == 1:
        first = encode_payload(listed[0], max_bytes=limit, task=task, default=default)
        text = f"[{first}]"
    else:
        text = encode_payloads(listed, max_bytes=limit, task=task, default=default)
        # Encoded once more on its own: a batch sharing an idempotency key inserts only it.
        first = (
            encode_payload(listed[0], max_bytes=limit, task=task, default=default) if listed else ""
        )
    return NewJobs(payloads=text, count=len(listed), first_payload=first, **columns)


def shared_key_results(job_id: int, count: int, *, inserted: bool) -> list[Enqueued]:
    """The results of jobs sharing one idempotency key: one job stands for all of them, made
    by the first (``inserted``) or already there (every one deduplicated)."""
    duplicate = Enqueued(job_id, deduplicated=True)
    return [Enqueued(job_id) if inserted else duplicate, *[duplicate] * (count - 1)]


def insert_params(jobs: Sequence[NewJob], channel: str) -> dict[str, Any]:
    """Parameters of ``job_insert_many``: one array per column."""
    return {
        "queue": [j.queue for j in jobs],
        "task": [j.task for j in jobs],
        "payload": [j.payload for j in jobs],
        "priority": [j.priority for j in jobs],
        "run_at": [j.run_at for j in jobs],
        "delay": [j.delay for j in jobs],
        "max_attempts": [j.max_attempts for j in jobs],
        "entity_key": [j.entity_key for j in jobs],
        "idempotency_key": [j.idempotency_key for j in jobs],
        "meta": [j.meta for j in jobs],
        "expires_at": [j.expires_at for j in jobs],
        "expires_in": [j.expires_in for j in jobs],
        "fair_key": [j.fair_key for j in jobs],
        "limit_key": [j.limit_key for j in jobs],
        "channel": channel,
    }


@dataclass
class InsertOutcome:
    """Matches the rows an insert returned to the jobs asked for."""

    jobs: Sequence[NewJob]
    results: list[Enqueued | None]

    @classmethod
    def start(cls, jobs: Sequence[NewJob]) -> InsertOutcome:
        return cls(jobs, [None] * len(jobs))

    def pending_indexes(self) -> list[int]:
        return [i for i, r in enumerate(self.results) if r is None]

    def add_inserted(self, indexes: Sequence[int], rows: Sequence[tuple[int, str | None]]) -> None:
        """Record what one ``job_insert_many`` over ``indexes`` returned (rows ordered by id).

        Ids are assigned in input order, so the rows without a key, and the first row of each
        key, line up with the inputs in order; a later input with an already-seen key (within
        this batch) is a duplicate of that first one.
        """
        by_key = {key: job_id for job_id, key in rows if key is not None}
        ids = iter(job_id for job_id, _ in rows)
        seen: set[str] = set()
        for i in indexes:
            key = self.jobs[i].idempotency_key
            if key is None:
                self.results[i] = Enqueued(next(ids))
            elif key in by_key and key not in seen:
                seen.add(key)
                self.results[i] = Enqueued(next(ids))
            elif key in by_key:
                self.results[i] = Enqueued(by_key[key], deduplicated=True)
            # else: an unfinished job already held the key; resolved by add_existing()

    def missing_keys(self) -> list[str]:
        return sorted({self.jobs[i].idempotency_key or "" for i in self.pending_indexes()})

    def add_existing(self, rows: Sequence[tuple[int, str]]) -> None:
        found = {key: job_id for job_id, key in rows}
        for i in self.pending_indexes():
            key = self.jobs[i].idempotency_key
            if key in found:
                self.results[i] = Enqueued(found[key], deduplicated=True)

    def done(self) -> list[Enqueued]:
        assert all(r is not None for r in self.results)
        return [r for r in self.results if r is not None]
