"""What ``skiplock demo``'s part 2 reports: :class:`AtWorkState`, what its live table shows
while the demo runs, and :class:`AtWorkResult`, the tally at the end (see
:mod:`skiplock._demo.command` for how both are drawn)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from skiplock._db.demo import DemoStatements
from skiplock.app import App
from skiplock.events import JobEvent


@dataclass
class AtWorkState:
    """What the live table shows."""

    workers: int
    started: float = field(default_factory=time.monotonic)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    executions: int = 0  # task runs started by this process's workers
    recorded: int = 0  # outcomes of those runs that counted: done, retry, failed
    retried: int = 0
    enqueued: int = 0

    def say(self, text: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:5.2f}s  {text}")

    def on_event(self, event: JobEvent) -> None:
        if event.kind == "started":
            self.executions += 1
            return
        self.recorded += event.outcome in ("done", "retry", "failed")
        job, error = event.job, _headline(event.error)
        name = f"job {job.id} ({job.task.removeprefix('demo.')})"
        if event.outcome == "retry":
            self.retried += 1
            if self.retried <= 2:
                self.say(f"{name} attempt {job.attempts}/{job.max_attempts} failed: {error}; "
                         "it will run again after a backoff")  # fmt: skip
        elif event.outcome == "failed":
            self.say(f"{name} failed for good after {job.attempts} attempts: {error}")


@dataclass
class AtWorkResult:
    enqueued: int
    done: int
    failed: int
    lost: int
    stuck: int
    duplicates: int
    retried: int
    recovered_lease: bool
    recovered_held: bool
    rolled_back_enqueue_absent: bool
    lease_recovery_seconds: float | None
    held_recovery_seconds: float | None
    seconds: float
    workers: int

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(self).items()}

    def problems(self) -> list[str]:
        """What went wrong, if anything (then skiplock has a bug, or the database a problem)."""
        found = []
        if self.lost or self.stuck or self.enqueued != self.done + self.failed:
            found.append(f"{self.lost} jobs lost and {self.stuck} stuck of {self.enqueued}")
        for model, ok in (("lease", self.recovered_lease), ("held-lock", self.recovered_held)):
            if not ok:
                found.append(f"the killed {model} worker's job was not run again by another")
        if not self.rolled_back_enqueue_absent:
            found.append("a job enqueued in a rolled-back transaction exists")
        return found


def _headline(error: str | None) -> str:
    return error.splitlines()[0] if error else "?"


def final_result(
    app: App,
    state: AtWorkState,
    ids: list[int],
    crash: dict[str, int],
    pids: set[int],
    recovered: dict[str, float],
    absent: bool,
) -> AtWorkResult:
    """The tally of a finished run, counted in the database: every job enqueued (``ids``), and
    what became of the crash-test jobs (``crash``) of the killed processes (``pids``)."""
    with app.sync_client.connection() as conn:
        demo = DemoStatements(app.queries)
        tally = demo.demo_jobs_tally(conn, ids)
        effects = demo.demo_effect_list(conn, list(crash.values()))
        runs = {m: [r[2] for r in effects if r[0] == job_id] for m, job_id in crash.items()}
    victim_runs = sum(pid in pids for pids_ in runs.values() for pid in pids_)
    jobs = {m: app.sync_client.get_job(job_id) for m, job_id in crash.items()}

    def recovered_by_another(model: str) -> bool:
        job = jobs[model]
        ran = runs[model]
        return (job is not None and job.status == "done" and len(ran) >= 2
                and ran[0] in pids and ran[-1] not in pids)  # fmt: skip

    # Both killed runs were attempts: the lease one spent when it was claimed, the held-lock one
    # counted by the claim that found it dead.
    lease_job, held_job = jobs["lease"], jobs["held"]
    return AtWorkResult(
        enqueued=len(ids),
        done=tally.get("done", 0),
        failed=tally.get("failed", 0),
        lost=len(ids) - sum(tally.values()),
        stuck=sum(n for status, n in tally.items() if status not in ("done", "failed")),
        duplicates=state.executions + victim_runs - state.recorded,
        retried=state.retried,
        recovered_lease=recovered_by_another("lease")
        and lease_job is not None
        and lease_job.attempts == 2,
        recovered_held=recovered_by_another("held")
        and held_job is not None
        and held_job.attempts == 2,
        rolled_back_enqueue_absent=absent,
        lease_recovery_seconds=recovered.get("lease"),
        held_recovery_seconds=recovered.get("held"),
        seconds=time.monotonic() - state.started,
        workers=state.workers,
    )
