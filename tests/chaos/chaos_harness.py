"""The fault-injection harness: worker processes, faults, the ledger and the checker.

A :class:`ChaosRun` owns one fresh schema (with its ledger table) on a PostgreSQL server, the
``skiplock worker chaos_app:app`` processes it starts there, and the list of faults it injected
(each with its time and the worker processes it hit).  After the queue drains, :func:`check`
compares the jobs table with the ledger, Jepsen ``total-queue`` style:

* **lost** - enqueued, but never completed nor failed: the row is gone, cancelled, or ``done``
  although no execution of the job ever returned successfully;
* **stuck** - still ``running``, ``pending`` or ``scheduled`` after the drain deadline;
* **stale writes accepted** - a terminal row written by a claim that no longer owned the job:
  a newer claim (a higher attempt) ran, or the claim the row names never returned the outcome
  the row shows (someone else's ``done`` landed on it);
* **duplicates** - executions beyond one per job (executions that failed on purpose excepted);
* **recovery** - from a fault to each job it interrupted running again (or, when a fault
  interrupted no job, to the worker it hit running a job again).

Every worker gets a DSN with an ``application_name`` unique to the run, so faults aimed at
database sessions only ever hit this run's workers, never other users of a shared server.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chaos_app
import psycopg
from psycopg import conninfo, sql

from helpers.polling import wait_for

HERE = Path(__file__).resolve().parent
TERMINAL = ("done", "failed")
FINISHED_RE = re.compile(
    r"event=finished job_id=(\d+) task=(\S+) queue=(\S+) attempt=(\d+)/(\d+) outcome=(\w+)"
)
STARTED_RE = re.compile(r"worker (\S+) started:")
RECLAIMED_RE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*reclaimed \d+ jobs whose lease expired: \{(.*)\}$",
    re.MULTILINE,
)


def with_params(dsn: str, **params: Any) -> str:
    """``dsn`` with connection parameters added or replaced."""
    return conninfo.make_conninfo(dsn, **params)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def max_per_window(times: Iterable[float], window: float = 1.0) -> int:
    """The largest number of ``times`` in any (sliding) window of ``window`` seconds."""
    ordered = sorted(times)
    best = start = 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


# -- worker processes ----------------------------------------------------------------------


class WorkerProc:
    """One ``skiplock worker`` process (in its own process group), logging to a file."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path, name: str) -> None:
        self.popen = popen
        self.log = log
        self.name = name
        self.started = time.time()
        self.stopped_by: str | None = None  # the fault that ended it, if any
        self._worker_id: str | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def worker_id(self) -> str | None:
        """The id it logged at start (None until it has started)."""
        if self._worker_id is None:
            with self.log.open(errors="replace") as f:
                found = STARTED_RE.search(f.read(20_000))
            self._worker_id = found[1] if found else None
        return self._worker_id

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def reclaims(self) -> list[tuple[float, int]]:
        """(time, job id) of each job this worker, as maintenance leader, reclaimed."""
        found = []
        for m in RECLAIMED_RE.finditer(self.stderr):
            at = datetime.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found += [(at, int(job_id)) for job_id in re.findall(r"(\d+): '", m[2])]
        return found

    def finished_at(self) -> list[tuple[float, int, int, str]]:
        """(time, job id, attempt, outcome) of each ``event=finished`` line it logged."""
        found = []
        for line in self.stderr.splitlines():
            m = FINISHED_RE.search(line)
            if m is not None:
                at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                found.append((at, int(m[1]), int(m[4]), m[6]))
        return found

    def finished(self) -> list[tuple[int, int, str]]:
        """(job id, attempt, outcome) of each ``event=finished`` line it logged."""
        return [(int(m[1]), int(m[4]), m[6]) for m in FINISHED_RE.finditer(self.stderr)]


@dataclass
class Fault:
    at: float  # time.time() when it was injected
    kind: str
    pids: list[int]  # the worker processes it hit
    detail: str = ""
    jobs: set[int] = field(default_factory=set)  # job ids the hit workers held (DB snapshot)
    up_at: float | None = None  # restarts: when the server accepted connections again


class ChaosRun:
    """A fresh schema with a ledger on ``dsn``, the workers run on it, the faults injected."""

    def __init__(
        self, dsn: str, label: str, workdir: Path | None = None, ledger_dsn: str | None = None
    ) -> None:
        """``ledger_dsn``: keep the ledger on another server (the same schema name there), so
        that it survives what happens to ``dsn``'s (a failover that loses commits)."""
        self.tag = secrets.token_hex(4)
        self.label = label
        self.schema = f"chaos_{label}_{self.tag}"
        self.dsn = dsn
        self.app_name = f"chaos_{self.tag}"
        self.worker_dsn = with_params(dsn, application_name=self.app_name)
        self.ledger_dsn = with_params(ledger_dsn or dsn, application_name=f"{self.app_name}_ledger")
        self._own_dir = workdir is None
        self.dir = workdir or Path(tempfile.mkdtemp(prefix=f"chaos-{label}-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.app = chaos_app.build(with_params(dsn, application_name=f"{self.app_name}_app"),
                                   self.schema)  # fmt: skip
        self.app.migrate()
        self.db = psycopg.connect(dsn, autocommit=True, application_name=f"{self.app_name}_db")
        self._ledger_db: psycopg.Connection[Any] | None = None
        if ledger_dsn is not None:
            self._ledger_db = psycopg.connect(ledger_dsn, autocommit=True)
            self.ledger_db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
        self.ledger_db.execute(sql.SQL(chaos_app.LEDGER_DDL).format(ledger=self.table("ledger")))
        self.workers: list[WorkerProc] = []
        self.faults: list[Fault] = []
        self.t0 = time.time()

    @property
    def ledger_db(self) -> psycopg.Connection[Any]:
        """The connection to the ledger's server (``db``, unless the ledger is elsewhere)."""
        return self._ledger_db or self.db

    def table(self, name: str) -> sql.Composable:
        return sql.Identifier(self.schema, name)

    # -- workers ---------------------------------------------------------------------------

    def start_worker(
        self,
        *,
        concurrency: int = 4,
        lease: float = 2.0,
        model: str | None = None,
        poll: float = 0.2,
        grace: float = 5.0,
        queues: str | None = None,
        extra: Sequence[str] = (),
        dsn: str | None = None,
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> WorkerProc:
        """``dsn``: the server as this worker reaches it (another route to the same server: a
        proxy), for its pool and its ledger writes; ``prefix``: what the command runs under
        (``ip netns exec NAME``); ``env``: more environment (``CHAOS_PERIODIC``: chaos_app)."""
        name = f"w{len(self.workers) + 1}"
        log = self.dir / f"{name}.log"
        worker_dsn = (
            self.worker_dsn if dsn is None else with_params(dsn, application_name=self.app_name)
        )
        ledger_dsn = (
            self.ledger_dsn
            if dsn is None
            else with_params(dsn, application_name=f"{self.app_name}_ledger")
        )
        command = [
            *prefix, sys.executable, "-m", "skiplock", "worker", "chaos_app:app",
            "--dsn", worker_dsn, "--concurrency", str(concurrency), "--lease", str(lease),
            "--poll-interval", str(poll), "--shutdown-grace", str(grace),
            "--log-level", "debug",  # the checks read every job's event=finished line
        ]  # fmt: skip
        command += ["--model", model] if model else []
        command += ["--queues", queues] if queues else []
        command += list(extra)
        extra_env = env or {}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SKIPLOCK_", "CHAOS_"))}
        env.update(CHAOS_DSN=worker_dsn, CHAOS_SCHEMA=self.schema, CHAOS_LEDGER_DSN=ledger_dsn)
        env.update(extra_env)
        with log.open("wb") as err:
            popen = subprocess.Popen(
                command,
                cwd=HERE,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        proc = WorkerProc(popen, log, name)
        self.workers.append(proc)
        return proc

    def wait_started(self, procs: Iterable[WorkerProc], timeout: float = 30.0) -> None:
        """Until each process has logged its worker id (it is connected and claiming)."""
        for proc in procs:
            wait_for(lambda p=proc: p.worker_id or not p.alive(), timeout, f"{proc.name} to start")
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited at start:\n{proc.stderr[-3000:]}")

    def kill(self, proc: WorkerProc, kind: str = "SIGKILL") -> Fault:
        """SIGKILL a worker; the fault records the jobs it still held a moment later."""
        leader = self.leader() == proc.worker_id
        proc.signal(signal.SIGKILL)
        proc.popen.wait(timeout=30)
        # The fault's time is when the process is gone: a job it started between the clock
        # reading and the signal's delivery is one the kill interrupted, which the bound counts
        # only if it started before this (a held-lock job's row is pending again by then, so the
        # rows below do not name it).
        at = time.time()
        proc.stopped_by = kind
        fault = Fault(at, kind, [proc.pid], proc.name + (" (leader)" if leader else ""))
        time.sleep(0.05)  # statements the process had already sent complete on the server
        fault.jobs = self.jobs_held_by(proc)
        self.faults.append(fault)
        return fault

    def leader(self) -> str | None:
        """The worker id holding the maintenance role now."""
        row = self.db.execute(
            sql.SQL("SELECT holder FROM {} WHERE expires_at > now()").format(self.table("leaders"))
        ).fetchone()
        return None if row is None else str(row[0])

    def jobs_held_by(self, proc: WorkerProc) -> set[int]:
        worker_id = proc.worker_id
        if worker_id is None:
            return set()
        rows = self.db.execute(
            sql.SQL("SELECT id FROM {} WHERE status = 'running' AND locked_by = %s").format(
                self.table("jobs")
            ),
            (worker_id,),
        ).fetchall()
        return {r[0] for r in rows}

    def stop_all(self, timeout: float = 60.0) -> dict[str, int | None]:
        """SIGTERM every live worker (once it has started: before, SIGTERM just kills it);
        their exit statuses (None: had to be killed)."""
        live = [p for p in self.workers if p.alive()]
        with contextlib.suppress(TimeoutError, RuntimeError):
            self.wait_started(live)
        for proc in live:
            proc.signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + timeout
        for proc in live:
            try:
                codes[proc.name] = proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait(timeout=30)
                codes[proc.name] = None
        return codes

    # -- the queue ---------------------------------------------------------------------------

    def enqueue(self, task: str, payloads: list[dict[str, Any]], **options: Any) -> list[int]:
        ids: list[int] = []
        for start in range(0, len(payloads), 2000):
            batch = payloads[start : start + 2000]
            ids += [e.id for e in self.app.enqueue_many(task, batch, **options)]
        return ids

    def counts(self) -> dict[str, int]:
        rows = self.db.execute(
            sql.SQL("SELECT status, count(*) FROM {} GROUP BY status").format(self.table("jobs"))
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    def unfinished(self) -> int:
        counts = self.counts()
        return sum(n for status, n in counts.items() if status not in (*TERMINAL, "cancelled"))

    def wait_drained(
        self, timeout: float, watch: Callable[[], None] | None = None, step: float = 0.2
    ) -> bool:
        """Until no job is pending, scheduled or running (False at the timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if watch is not None:
                watch()
            if self.unfinished() == 0:
                return True
            time.sleep(step)
        return False

    def jobs(self) -> dict[int, dict[str, Any]]:
        cur = self.db.cursor(row_factory=psycopg.rows.dict_row)
        rows = cur.execute(
            sql.SQL(
                "SELECT id, status, attempts, max_attempts, locked_by, last_error, run_at, "
                "finished_at FROM {}"
            ).format(self.table("jobs"))
        ).fetchall()
        return {r["id"]: r for r in rows}

    def ledger(self) -> list[Execution]:
        rows = self.ledger_db.execute(
            sql.SQL(
                "SELECT job_id, attempt, worker, pid, started, ended, outcome, stopped FROM {} "
                "ORDER BY started"
            ).format(self.table("ledger"))
        ).fetchall()
        return [Execution(*r) for r in rows]

    def logged(self) -> list[tuple[str, int, int, str]]:
        """(worker name, job id, attempt, outcome) of every finished line of every worker."""
        return [(p.name, *entry) for p in self.workers for entry in p.finished()]

    # -- sessions ----------------------------------------------------------------------------

    def sessions(self) -> list[tuple[int, int | None, str, str]]:
        """(backend pid, client port, kind, state) of this run's worker sessions: ``pool`` for
        skiplock's pooled connections, ``listener`` for the LISTEN connection."""
        channel = f"%skiplock.{self.schema}%"
        rows = self.db.execute(
            "SELECT pid, client_port, CASE WHEN application_name = %s THEN 'pool' "
            "ELSE 'listener' END, coalesce(state, '') FROM pg_stat_activity "
            "WHERE application_name = %s OR (application_name = 'skiplock-listener' "
            "AND ((query ILIKE 'listen%%' OR query ILIKE '%%/* listener of %%') AND query LIKE %s "
            "OR pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = hashtext(%s)::oid)))",  # the worker's idle mark (design.md)
            (self.app_name, self.app_name, channel, f"skiplock_idle/skiplock.{self.schema}"),
        ).fetchall()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def held_job_sessions(self, job_ids: Iterable[int]) -> dict[int, int]:
        """Backend pid of the session whose transaction runs each of these held-lock jobs: the
        one holding the job's held-lock marker (see job_claim in jobs.sql).  Found on the
        server, so over a unix socket as well as TCP."""
        rows = self.db.execute(
            "SELECT objid::int8, pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND objsubid = 2 AND database = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())"
            " AND classid = hashtext('skiplock_held_job_id/' || %s)::oid",
            (self.schema,),
        ).fetchall()
        holders = {int(key): int(pid) for key, pid in rows}
        return {
            job_id: holders[job_id & 0xFFFFFFFF]
            for job_id in job_ids
            if job_id & 0xFFFFFFFF in holders
        }

    def listening_workers(self) -> int:
        return sum(1 for s in self.sessions() if s[2] == "listener")

    def close(self) -> None:
        for proc in self.workers:
            if proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=30)
        with contextlib.suppress(psycopg.Error):
            self.app.sync_client.drop_schema()
        self.app.close()
        self.db.close()
        if self._ledger_db is not None:
            with contextlib.suppress(psycopg.Error):
                self._ledger_db.execute(
                    sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(self.schema))
                )
            self._ledger_db.close()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def socket_owner(ports: dict[int, int], pids: Iterable[int]) -> dict[int, int]:
    """Map client TCP ports (port -> backend pid) to the worker process that owns each socket,
    from /proc: the socket inode of each local port, then the processes' open fds."""
    inode_of_port: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                parts = line.split()
                port = int(parts[1].rsplit(":", 1)[1], 16)
                if port in ports:
                    inode_of_port[port] = parts[9]
    owner: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    for port, inode in inode_of_port.items():
                        if target == f"socket:[{inode}]":
                            owner[ports[port]] = pid
    return owner


# -- the checker ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Execution:
    job_id: int
    attempt: int
    worker: str
    pid: int
    started: float
    ended: float | None
    outcome: str | None
    stopped: float | None  # when a cancellation reached the handler (``note_stop`` jobs only)


@dataclass
class Check:
    lost: list[int]
    stuck: list[int]
    stale: list[int]
    duplicates: int
    bound: int  # duplicates the faults (and lease expiries of live workers) can explain
    executions: int
    recovery: list[float]
    late_rejected: int  # outcomes logged as 'lost': writes of claims that had lost their job
    per_fault: list[int]  # jobs interrupted by each fault
    per_fault_recovery: list[float | None]  # the slowest recovery after each fault
    requeued: list[float]  # fault -> lease reclaimed (from the workers' logs), per job
    statuses: dict[str, int]
    notes: dict[str, Any] = field(default_factory=dict)


def check(
    run: ChaosRun,
    enqueued: Iterable[int],
    *,
    recovery_from: str = "fault",
) -> Check:
    """The checker (see the module doc).  ``recovery_from``: ``fault`` (the fault's time) or
    ``up`` (for restarts: measure resume latency from the fault's time too, but to the first job
    started after the server was up)."""
    jobs = run.jobs()
    runs = run.ledger()
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for e in runs:
        by_job[e.job_id].append(e)
    enqueued = list(enqueued)
    lost, stuck, stale = [], [], []
    duplicates = 0
    for job_id in enqueued:
        row = jobs.get(job_id)
        execs = by_job.get(job_id, [])
        if row is None or row["status"] == "cancelled":
            lost.append(job_id)
            continue
        status = row["status"]
        if status not in TERMINAL:
            stuck.append(job_id)
            continue
        if status == "done" and not any(e.outcome == "ok" for e in execs):
            lost.append(job_id)  # done without ever having run to the end
            continue
        duplicates += max(0, len(execs) - sum(e.outcome == "fail" for e in execs) - 1)
        if any(e.attempt > row["attempts"] for e in execs):
            stale.append(job_id)  # a newer claim ran, yet an older one's outcome stands
            continue
        by_reclaim = (row["last_error"] or "").startswith("lease expired")
        owner = [e for e in execs if e.attempt == row["attempts"] and e.worker == row["locked_by"]]
        expected = {"done": "ok", "failed": "fail"}[status]
        if not (status == "failed" and by_reclaim) and not any(
            e.outcome == expected for e in owner
        ):
            stale.append(job_id)  # the claim the row names never returned this outcome

    logged = run.logged()
    late = [entry for entry in logged if entry[3] == "lost"]
    released = sum(1 for entry in logged if entry[3] == "release")
    # The faults: which executions each one interrupted, and how long until those jobs ran again.
    reclaimed: dict[int, list[float]] = defaultdict(list)
    for proc in run.workers:
        for at, job_id in proc.reclaims():
            reclaimed[job_id].append(at)
    requeued: list[float] = []  # fault -> a worker reclaimed the job
    recovery: list[float] = []
    per_fault: list[int] = []
    per_fault_recovery: list[float | None] = []
    # What each worker process reported written: its event=finished lines, logged once the
    # outcome is (a held-lock job's commits in the job's own transaction).
    reported = {
        p.pid: {(job_id, attempt) for job_id, attempt, _ in p.finished()} for p in run.workers
    }
    explained: set[int] = set()
    for fault in run.faults:
        hit = set(fault.pids)
        # Running at the fault: its handler had not returned, or had but its worker had not
        # reported the outcome written, and the job ran again after it (a held-lock job runs
        # until its transaction commits, however long after its handler that is; the rerun
        # may start before the harness has read the clock after the kill); or still held in
        # the rows (lease claims).
        # Also a job its worker started after the fault, before the service was back (from
        # the jobs it had claimed ahead: a claim committed as the server went away), whose
        # outcome it never reported written, and that ran again.
        back = fault.up_at or fault.at
        interrupted = fault.jobs | {
            e.job_id
            for e in runs
            if e.pid in hit
            and (
                (
                    e.started <= fault.at
                    and (
                        e.ended is None
                        or e.ended > fault.at
                        or (
                            (e.job_id, e.attempt) not in reported.get(e.pid, set())
                            and any(x.started > e.started for x in by_job[e.job_id])
                        )
                    )
                )
                or (
                    fault.at < e.started <= back
                    and (e.job_id, e.attempt) not in reported.get(e.pid, set())
                    and any(x.started > e.started for x in by_job[e.job_id])
                )
            )
        }
        per_fault.append(len(interrupted))
        explained |= interrupted
        reruns = []
        for job_id in interrupted:
            after = [t for t in reclaimed.get(job_id, []) if t > fault.at]
            if after:
                requeued.append(min(after) - fault.at)
            later = [e.started for e in by_job.get(job_id, []) if e.started > fault.at]
            if later:
                reruns.append(min(later) - fault.at)
        if reruns:
            recovery += reruns
            per_fault_recovery.append(max(reruns))
            continue
        since = fault.up_at if (recovery_from == "up" and fault.up_at) else fault.at
        resumed = [
            e.started
            for e in runs
            if e.started > since and (e.pid in hit or recovery_from == "up" or not fault.pids)
        ]
        if resumed:
            recovery.append(min(resumed) - fault.at)
        per_fault_recovery.append(min(resumed) - fault.at if resumed else None)
    counts = Counter(row["status"] for row in jobs.values())
    # For a failure's message: the jobs run more than once that no fault explains, with
    # (pid, attempt, started, ended, outcome, reported written) of each of their executions.
    unexplained = {
        job_id: [
            (
                e.pid,
                e.attempt,
                e.started,
                e.ended,
                e.outcome,
                (job_id, e.attempt) in reported.get(e.pid, set()),
            )
            for e in by_job[job_id]
        ]
        for job_id in enqueued
        if job_id not in explained
        and len(by_job.get(job_id, [])) - sum(e.outcome == "fail" for e in by_job[job_id]) > 1
    }
    return Check(
        lost=lost,
        stuck=stuck,
        stale=stale,
        duplicates=duplicates,
        bound=sum(per_fault) + len(late) + released,
        executions=len(runs),
        recovery=recovery,
        late_rejected=len(late),
        per_fault=per_fault,
        per_fault_recovery=per_fault_recovery,
        requeued=requeued,
        statuses=dict(counts),
        notes={"unexplained_duplicates": dict(list(unexplained.items())[:5])}
        if unexplained
        else {},
    )


# -- results -------------------------------------------------------------------------------


@dataclass
class Result:
    """One scenario's figures, for the assertions and for docs/reliability.md."""

    key: str
    title: str
    jobs: int
    faults: str
    lost: int | None = None
    stuck: int | None = None
    stale: int | None = None
    duplicates: int | None = None
    bound: int | None = None
    recovery: list[float] = field(default_factory=list)
    wall: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # scenario-specific checks that failed

    @property
    def p50(self) -> float | None:
        return statistics.median(self.recovery) if self.recovery else None

    @property
    def p99(self) -> float | None:
        return percentile(self.recovery, 99)

    def summary(self) -> str:
        rec = (
            f"recovery p50 {self.p50:.2f}s p99 {self.p99:.2f}s"
            if self.p50 is not None and self.p99 is not None
            else "recovery -"
        )
        return (
            f"{self.key}: jobs={self.jobs} faults='{self.faults}' lost={self.lost} "
            f"stuck={self.stuck} stale={self.stale} duplicates={self.duplicates} "
            f"(bound {self.bound}) {rec} wall={self.wall:.1f}s notes={self.notes} "
            f"failures={self.failures}"
        )

    def expect(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    @classmethod
    def from_check(
        cls, key: str, title: str, jobs: int, faults: str, c: Check, run_faults: list[Fault]
    ) -> Result:
        result = cls(
            key,
            title,
            jobs,
            faults,
            lost=len(c.lost),
            stuck=len(c.stuck),
            stale=len(c.stale),
            duplicates=c.duplicates,
            bound=c.bound,
            recovery=c.recovery,
        )
        result.notes.update(
            executions=c.executions,
            late_writes_rejected=c.late_rejected,
            faults=[
                f"{f.kind}{' ' + f.detail if f.detail else ''}: {n} jobs, "
                + ("-" if r is None else f"{r:.2f} s")
                for f, n, r in zip(run_faults, c.per_fault, c.per_fault_recovery, strict=True)
            ],
            statuses=c.statuses,
        )
        result.notes.update(c.notes)
        if c.requeued:
            result.notes["reclaimed_after_fault_p50_p99"] = (
                round(statistics.median(c.requeued), 2),
                round(percentile(c.requeued, 99) or 0, 2),
            )
        if c.lost:
            result.notes["lost_ids"] = c.lost[:20]
        if c.stuck:
            result.notes["stuck_ids"] = c.stuck[:20]
        if c.stale:
            result.notes["stale_ids"] = c.stale[:20]
        return result


# -- silent network loss ---------------------------------------------------------------------


def blackhole_available(dsn: str) -> str | None:
    """None when iptables can drop the packets of connections to ``dsn`` here, else why not."""
    host = conninfo.conninfo_to_dict(dsn).get("host") or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        return f"the server is not reached over the loopback interface (host {host!r})"
    if os.geteuid() != 0:
        return "adding iptables rules needs root"
    if shutil.which("iptables") is None:
        return "no iptables program (apt-get install iptables)"
    probe = subprocess.run(["iptables", "-w", "-n", "-L", "INPUT"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"iptables cannot be used here: {probe.stderr.strip()[:200]}"
    return None


class Blackhole:
    """Drops every packet of chosen TCP connections to or from the loopback interface, in both
    directions, without a reset: each end stops hearing from the other, as when a failover
    moves the server's address or a NAT forgets the connections.  A connection is named by its
    client port; the rules carry a comment unique to this object and all go at :meth:`close`."""

    PREFIX = "skiplock-chaos-"

    def __init__(self, tag: str) -> None:
        self.comment = f"{self.PREFIX}{os.getpid()}-{tag}"
        self.ports: list[int] = []
        self.purge_orphans()

    @classmethod
    def purge_orphans(cls) -> None:
        """Delete the rules of runs whose process is gone (killed before its cleanup): left in
        place, a rule would silence any later connection that happens to get its port."""
        listed = subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True,
                                text=True, check=True).stdout  # fmt: skip
        for line in listed.splitlines():
            found = re.search(rf'--comment "?{cls.PREFIX}(\d+)-', line)
            if found is None or line.split()[0] != "-A":
                continue
            with contextlib.suppress(OSError):
                os.kill(int(found[1]), 0)
                continue  # its run is still going
            rule = shlex.split(line)[2:]  # after "-A INPUT"
            subprocess.run(["iptables", "-w", "-D", "INPUT", *rule], capture_output=True)

    def _rule(self, action: str, port: int, direction: str) -> None:
        subprocess.run(
            ["iptables", "-w", action, "INPUT", "-i", "lo", "-p", "tcp", direction, str(port),
             "-m", "comment", "--comment", self.comment, "-j", "DROP"],
            check=True, capture_output=True,
        )  # fmt: skip

    def drop(self, port: int) -> None:
        self._rule("-I", port, "--sport")
        self._rule("-I", port, "--dport")
        self.ports.append(port)

    def close(self) -> None:
        for port in self.ports:
            for direction in ("--sport", "--dport"):
                with contextlib.suppress(subprocess.CalledProcessError):
                    self._rule("-D", port, direction)
        self.ports.clear()
