"""Part 2 of ``skiplock demo``: skiplock at work, with failures and crashes on purpose.

* A transactional enqueue that commits (an order with its two jobs) and one that rolls back
  (the payment is declined: the order and its receipt job are both gone).
* A few thousand image jobs for a fleet of workers; every 20th is an upload that fails twice
  before it works (retries with backoff) and the warehouse call fails on every attempt (it
  ends ``failed``).
* Two worker *processes*, each killed with SIGKILL in the middle of a job: a lease worker (its
  job stays ``running`` until the lease expires, then the leader reclaims it) and a held-lock
  worker (its transaction rolls back: the job is claimable at once, and the claim that finds it
  counts the dead attempt).  A standby worker runs both jobs again: delivery is at-least-once,
  so their side effects happen twice.

The killed workers run the app of :mod:`skiplock._demo.app` in their own processes.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from skiplock._db.demo import DemoStatements
from skiplock._demo.app import APP_SPEC, CRASH_QUEUES, ENV_DSN, ENV_SCHEMA, ENV_STALL, FLEET_QUEUES
from skiplock._demo.report import AtWorkResult, AtWorkState, final_result
from skiplock.app import App
from skiplock.errors import SkiplockError
from skiplock.worker import Worker

UPLOAD_EVERY = 20  # every 20th image job is an upload that fails twice, then works
LEASE_SECONDS = 2.0  # fleet and standby; the doomed lease worker's lease is 1 s


class DemoFailed(SkiplockError):
    """The demo could not stage its scenario (a worker process did not start ...), or what it
    saw contradicts skiplock's guarantees (a job lost, a job claimed twice under a lock)."""


class _Declined(Exception):
    pass


def _prepare(app: App, jobs: int, state: AtWorkState) -> tuple[list[int], dict[str, int], bool]:
    """Tables, the two transactional enqueues, the crash-test jobs and the bulk.  Returns the
    ids of every job enqueued, the crash-test jobs, and whether the rolled-back job is absent."""
    demo, ids = DemoStatements(app.queries), []
    with app.sync_client.connection() as conn:
        demo.demo_jobs_reset(conn)
        demo.demo_tables_create(conn)
        with conn.transaction():
            order = demo.demo_order_insert(conn, customer="ada", total_cents=1999)
            for task in ("demo.send_receipt", "demo.notify_warehouse"):
                ids.append(app.enqueue(task, {"order_id": order}, conn=conn).id)
        state.say(f"order {order} committed in one transaction with its jobs {ids[0]}, {ids[1]}")
        try:
            with conn.transaction():
                declined = demo.demo_order_insert(conn, customer="bob", total_cents=5)
                ghost = app.enqueue("demo.send_receipt", {"order_id": declined}, conn=conn).id
                raise _Declined
        except _Declined:
            pass
        absent = app.sync_client.get_job(ghost, conn) is None
        absent = absent and demo.demo_order_count(conn, declined) == 0
        state.say(f"order {declined} rolled back (payment declined): its receipt job {ghost} "
                  f"{'rolled back with it' if absent else 'EXISTS, which is a bug'}")  # fmt: skip
        crash = {
            "lease": app.enqueue("demo.export_report", {"report_id": 7}, conn=conn).id,
            "held": app.enqueue("demo.post_ledger", {"entry_id": 7}, conn=conn).id,
        }
        last = UPLOAD_EVERY - 1
        resizes = [
            {"image_id": i, "ms": 2 + i * 7 % 9} for i in range(jobs) if i % UPLOAD_EVERY != last
        ]
        uploads = [{"image_id": i, "failures": 2} for i in range(jobs) if i % UPLOAD_EVERY == last]
        ids += [e.id for e in app.enqueue_many("demo.resize_image", resizes, conn=conn)]
        ids += [e.id for e in app.enqueue_many("demo.upload_thumbnail", uploads, conn=conn)]
    ids += crash.values()
    state.enqueued = len(ids)
    state.say(f"enqueued {len(ids)} jobs ({len(uploads)} uploads fail twice before they work)")
    return ids, crash, absent


@dataclass
class _Victim:
    """A worker process that will be killed with SIGKILL in the middle of its job."""

    model: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes]

    @classmethod
    def spawn(cls, app: App, model: str, queue: str) -> _Victim:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
        env.update({ENV_DSN: app.dsn, ENV_SCHEMA: app.schema, ENV_STALL: "300"})
        args = [sys.executable, "-m", "skiplock", "worker", APP_SPEC, "--queues", queue,
                "--concurrency", "1", "--processes", "1", "--lease", "1", "--poll-interval",
                "0.1", "--shutdown-grace", "0", "--log-level", "WARNING"]  # fmt: skip
        log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by run_at_work)
        proc = subprocess.Popen(
            args, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        return cls(model, proc, log)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]


def _worker(app: App, queues: list[str], state: AtWorkState, name: str) -> Worker:
    return Worker(
        app,
        queues=queues,
        concurrency=4,
        lease_seconds=LEASE_SECONDS,
        poll_interval=0.1,
        shutdown_grace=5.0,
        worker_id=f"{name}-{secrets.token_hex(3)}",
        on_event=state.on_event,
    )


def _observe(app: App, state: AtWorkState, crash_ids: list[int]) -> list[tuple[int, int, int]]:
    """Refresh the live counts; returns the side effects of the crash-test jobs so far."""
    counts: dict[str, dict[str, int]] = {}
    for queue, status, n in app.sync_client.counts():
        if queue in FLEET_QUEUES or queue in CRASH_QUEUES:
            counts.setdefault(queue, {})[status] = n
    state.counts = counts
    with app.sync_client.connection() as conn:
        return DemoStatements(app.queries).demo_effect_list(conn, crash_ids)


async def run_at_work(
    app: App,
    *,
    jobs: int,
    workers: int,
    on_tick: Callable[[AtWorkState], None],
    timeout: float = 120.0,
) -> AtWorkResult:
    """Run part 2 on ``app`` (a migrated schema built by :func:`build_app`)."""
    state = AtWorkState(workers)
    ids, crash, absent = await asyncio.to_thread(_prepare, app, jobs, state)
    fleet = [_worker(app, FLEET_QUEUES, state, f"fleet{i + 1}") for i in range(workers)]
    standby = _worker(app, CRASH_QUEUES, state, "standby")
    runs = [asyncio.create_task(w.run()) for w in fleet]
    victims: dict[str, _Victim] = {}
    killed_at: float | None = None
    recovered: dict[str, float] = {}
    pids: set[int] = set()
    try:
        while not any(w.elector is not None and w.elector.is_leader for w in fleet):
            if any(r.done() for r in runs):
                await next(r for r in runs if r.done())  # a worker could not start: why
                raise DemoFailed("a worker of the fleet stopped before the demo began")
            await asyncio.sleep(0.02)  # the fleet leads maintenance, not the doomed workers
        for model, queue in (("lease", "exports"), ("held", "ledger")):
            victims[model] = _Victim.spawn(app, model, queue)
        pids = {v.proc.pid for v in victims.values()}
        state.say(f"started a lease worker (pid {victims['lease'].proc.pid}) and a held-lock "
                  f"worker (pid {victims['held'].proc.pid}) for jobs {crash['lease']} and "
                  f"{crash['held']}, and a fleet of {workers} workers for the rest")  # fmt: skip
        stage_by = time.monotonic() + 30
        deadline = time.monotonic() + timeout
        standby_at: float | None = None
        while True:
            effects = await asyncio.to_thread(_observe, app, state, list(crash.values()))
            now = time.monotonic()
            if standby_at is None:
                _check_victims(victims, stage_by)
                started = {m for m, v in victims.items() if (crash[m], 1, v.proc.pid) in effects}
                if len(started) == 2:
                    runs.append(asyncio.create_task(standby.run()))
                    standby_at = now
                    state.say("both are in the middle of their jobs; a standby worker on their "
                              "queues skips the locked row and waits")  # fmt: skip
            elif killed_at is None and now - standby_at > 0.3:
                for victim in victims.values():
                    victim.kill()
                killed_at = now
                state.say(f"killed both worker processes with SIGKILL (pids {sorted(pids)})")
            elif killed_at is not None:
                for model, job_id in crash.items():
                    if model not in recovered:
                        job = await asyncio.to_thread(app.sync_client.get_job, job_id)
                        if job is not None and job.status == "done":
                            recovered[model] = now - killed_at
                            state.say(_recovery_text(model, job_id, job.attempts, now - killed_at))
            on_tick(state)
            final = sum(c.get("done", 0) + c.get("failed", 0) for c in state.counts.values())
            if len(recovered) == 2 and final >= state.enqueued:
                break
            if now > deadline:
                state.say(f"gave up waiting after {timeout:.0f}s")
                break
            await asyncio.sleep(0.1)
    finally:
        for victim in victims.values():
            victim.kill()
            victim.log.close()
        for w in [*fleet, standby]:
            w.stop()
        await asyncio.gather(*runs, return_exceptions=True)
    return await asyncio.to_thread(final_result, app, state, ids, crash, pids, recovered, absent)


def _check_victims(victims: dict[str, _Victim], stage_by: float) -> None:
    for victim in victims.values():
        if victim.proc.poll() is not None or time.monotonic() > stage_by:
            raise DemoFailed(
                f"the {victim.model} worker process did not start its job "
                f"(exit status {victim.proc.poll()}); its output:\n{victim.output()}"
            )


def _recovery_text(model: str, job_id: int, attempts: int, seconds: float) -> str:
    if model == "lease":
        how = "its lease expired, the leader reclaimed it (attempt 1 spent)"
    else:
        how = (
            "its transaction rolled back with the dead connection: claimable at once (attempt 1 "
            "counted by that claim)"
        )
    return f"job {job_id}: {how}; the standby ran it, done {seconds:.2f}s after the kill"
