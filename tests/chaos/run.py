"""Run the fault-injection scenarios and write docs/reliability.md.

    python tests/chaos/run.py --full --dsn postgresql://postgres@127.0.0.1:5432/test

``--full`` runs every scenario at full size (a quarter of an hour on a 2-core machine) and
rewrites ``docs/reliability.md``; without it the quick sizes CI uses run and the table is only
printed (``--write`` writes it anyway).  ``--only kill-lease,race`` picks scenarios.  The
scenario that restarts PostgreSQL never touches the server of ``--dsn``: it starts a scratch
cluster of its own (initdb + pg_ctl).  Exit status 1 when any check failed.

    python tests/chaos/run.py --failover --full --dsn DSN

runs the primary failover scenarios instead (a scratch primary and standby of their own; the
ledger on ``--dsn``'s server) and rewrites only their section of ``docs/reliability.md``, which
the other runs keep as it is.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the harness, and tests/helpers/

from chaos_harness import Result  # noqa: E402
from chaos_scenarios import FAILOVER_SCENARIOS, SCENARIOS, SIZES  # noqa: E402

ROOT = HERE.parent.parent
DOC = ROOT / "docs" / "reliability.md"
FAILOVER_BEGIN = "<!-- failover: begin (python tests/chaos/run.py --failover --full) -->"
FAILOVER_END = "<!-- failover: end -->"
# Written by tests/network/scenarios.py --full; a full run here keeps it as it is.
HOSTS_BEGIN = "<!-- hosts: begin (python tests/network/scenarios.py --full) -->"
HOSTS_END = "<!-- hosts: end -->"

EXPLANATIONS = {
    "kill-lease": (
        "**kill -9, lease model.** {jobs} jobs of 5-50 ms on 3 workers (concurrency 4, lease "
        "2 s, poll 0.2 s); every {every} s a random worker (the maintenance leader "
        "included, in full mode) gets SIGKILL and a new one starts. "
        "Its claims stay `running` until the lease runs out and a surviving worker reclaims "
        "them (every worker reclaims expired leases, at the reclaim interval: half the lease, "
        "1 s here). Checks: every job done, none lost or stuck, no stale write, duplicates no "
        "more than the jobs the killed workers held. Recovery is kill → job running again: the "
        "lease expiry, the reclaim interval, and the next claim from the start of the queue "
        "(a reclaimed job keeps its `run_at`, so it is among the first claimed again). The "
        "details give kill → reclaimed separately (from the workers' logs)."
    ),
    "kill-held": (
        "**kill -9, held-lock model.** The same, with `--model held`: each job's row lock is "
        "held by an open transaction; when the process dies its backend sees the socket close, "
        "rolls back, and the job can be claimed again at once; that claim finds the dead "
        "start's record (`held_starts`) and counts the attempt (`WorkerDied`) before running "
        "it. Checks as above; recovery is kill → job running again."
    ),
    "kill-leader": (
        "**kill -9 of the maintenance leader.** {rounds} round(s): two lease workers (lease "
        "{lease} s, poll 0.2 s), the leader running some of 8 jobs of 1.5 s gets SIGKILL. "
        "docs/worker.md promises that a killed worker's leased jobs run again \"after at most "
        '--lease seconds plus the reclaim interval"; the check allows that plus the poll '
        "interval plus 2 s. The survivor reclaims them itself (every worker does, not only "
        "the leader, whose role would pass on only 10 s after its last renewal)."
    ),
    "stop": (
        "**SIGSTOP for 3x the lease.** A worker running {jobs_per_round} jobs of 2 s (lease "
        "{lease} s) is frozen; a separate maintenance leader reclaims its jobs once the lease "
        "runs out, a second worker runs them, then the frozen one gets SIGCONT (after 3x the "
        "lease, and not before the new owner has every job). Checks: its heartbeat is refused "
        "(`lease lost`), every outcome it then reports is logged `outcome=lost`, and each row "
        "shows only the new owner (done, attempt 2, the new worker, the reclaim's message). "
        "Overlap = how long both executions of one job coexisted (the frozen one counts "
        "while frozen: its 2 s are over when it resumes, so it ends at once, before a "
        "heartbeat could find its lease reclaimed and stop it)."
    ),
    "stop-long": (
        "**SIGSTOP while long jobs run.** A lease worker (lease {lease:g} s) runs {jobs} jobs of "
        "{seconds:g} s and is frozen; a second worker starts, reclaims them once their leases "
        "expire and runs them; then the frozen one gets SIGCONT, with most of each job's time "
        "still ahead of it. Its first heartbeat finds the leases reclaimed and it cancels its "
        "runs (each handler notes when the cancellation reached it). Checks: each of its runs "
        "is cancelled within a lease of SIGCONT, none runs to its end, each is logged "
        "`outcome=lost` (nothing written); the other worker runs every job to its end as "
        "attempt 2. Both running = the new run's start → the old run's cancellation (the "
        "freeze included)."
    ),
    "race": (
        "**Late completion racing the reclaim (SQL level).** In-process, with three "
        "connections and the store's statements: A claims a job with a lease that expires at "
        "once; a reclaim, B's claim, A's late write (finish, fail with retry, final fail, "
        "snooze, heartbeat, release or cancel) and B's finish run in a random order, and in "
        "most iterations two neighbouring statements of different actors run at the same "
        "moment from two threads. A stale write accepted = A's write changed the row although "
        "the reclaim had taken the job (both statements changed it). Every final row (status, "
        "attempts, owner, max_attempts, who wrote last_error) and every statement's result "
        "must be explained by a serial order, and after settling every job ends final."
    ),
    "terminate-lease": (
        "**pg_terminate_backend, lease model.** Every {every} s one of the run's worker "
        "sessions is terminated: a pooled connection, or a LISTEN connection. Sessions are "
        "found by an `application_name` unique to the run (the listener's by its `LISTEN` on "
        "the run's channel) and traced to the worker process through `/proc` (client port → "
        "socket inode → process). Checks: no worker exits, every listener reconnects, every "
        "worker LISTENs at the end, nothing lost, stuck or double-written. Recovery is "
        "termination → the affected worker running a job again."
    ),
    "terminate-held": (
        "**pg_terminate_backend, held-lock model.** The same with `--model held`: a terminated "
        "session may be a held job's transaction, which rolls back; the worker counts that "
        "attempt (so a job whose outcome cannot be written does not loop) and the job runs "
        "again after its backoff."
    ),
    "terminate-held-long": (
        "**pg_terminate_backend of long held-lock jobs' sessions.** A held-lock worker runs "
        "{jobs} jobs of {seconds:g} s; a second one starts, idle; then every session holding "
        "one of the first worker's job transactions (the holder of the job's held-lock marker, "
        "in `pg_locks`) is terminated (as "
        "`idle_in_transaction_session_timeout` or an operator would end it), so the jobs are "
        "claimable again at once. The first worker looks at its held jobs' connections every "
        "second (no round trip) and stops the runs whose session ended (each handler notes "
        "when the cancellation reached it). Checks: each of its runs is cancelled within 3 s "
        "of the termination, none runs to its end, each is logged `outcome=lost` (nothing "
        "written); every job runs again to its end as attempt 2 (the dead start counted). "
        "Both running = the new run's start → the old run's cancellation."
    ),
    "blackhole-lease": (
        "**Silent connection loss, lease model.** {faults} time(s), every {every} s, every "
        "packet of all of one worker's connections (its pool and its LISTEN connection; found "
        "as in the terminate scenarios) is dropped for good, both ways, by iptables rules on "
        "the loopback interface: no reset reaches either end, as after a failover that moved "
        "the server's address or a NAT that forgot the connections. 2 workers (concurrency "
        "4, lease 2 s) drain {jobs} jobs of 20-80 ms; TCP timeouts: {timeouts_text}. Without "
        "keepalives a statement waits ~15 min of retransmissions and a LISTEN connection "
        "forever (the client's side), and the server keeps the dead sessions, with their "
        "transactions and row locks, for over two hours (the server's side; skiplock gives "
        "each session its client's settings). Checks: no worker exits; the server drops every "
        "dead session; each hit worker's listener notices and reconnects, and the worker runs "
        "jobs again; every job done, nothing lost, stuck or double-written. Recovery is the "
        "fault → each job the worker had running again (reclaimed at lease expiry), or the "
        "worker running a job again."
    ),
    "blackhole-held": (
        "**Silent connection loss, held-lock model.** The same with `--model held`: the held "
        "jobs' rows stay locked by the dead sessions' open transactions until the server drops "
        "them (its keepalives and user timeout, the client's values); then they roll back and "
        "the other worker runs the jobs again, counting the dead attempt. When the hit worker "
        "notices first (its commit fails), it counts the attempt it could not record and the "
        "job waits out its retry backoff (the `work` task's default policy), which is where "
        "the longer recoveries come from."
    ),
    "restart": (
        "**PostgreSQL restarts.** On a scratch cluster the suite creates (`initdb`, `pg_ctl` "
        "on a free port; never the shared server), {restarts} restarts alternating "
        "`pg_ctl stop -m fast` and `-m immediate` (a crash: recovery on start), each after "
        "{every} s with {down} s of downtime, while 2 workers drain {jobs} jobs and a producer "
        "enqueues about {rate} jobs/s with idempotency keys, retrying an enqueue until it "
        "returns. Checks: no worker exits, both LISTEN again, every enqueue that returned (and "
        "every preloaded job) is done, nothing stuck, no stale write. Recovery is the moment "
        "the server went down → each interrupted job running again, or, when none had to run "
        "again, → the first job started once the server was back (downtime included). A "
        "downtime longer than the lease (2 s) lets the leases of running jobs expire: their "
        "outcomes are refused (`outcome=lost`), they are reclaimed and run again, which is "
        "what the p99 shows."
    ),
    "sigterm-lease": (
        "**SIGTERM with jobs in flight, lease model.** {rounds} round(s): both workers "
        "(concurrency {concurrency}, grace {grace} s) get SIGTERM while {long} jobs of 3 s "
        "(max_attempts 1) and short ones run; then new workers drain the rest. Checks: exit "
        "status 0 within the grace (+ margin); no row left `running`; every job cut short is "
        "logged `outcome=release` and is back to `pending` with its attempt given back "
        "(attempts = that attempt - 1 right after the shutdown, and at the end attempts = "
        "executions that returned); jobs claimed ahead and never started are logged "
        "`outcome=release` too, never ran and got their attempt back; every job done. Recovery "
        "is SIGTERM → released job running again (includes starting the new workers)."
    ),
    "sigterm-held": (
        "**SIGTERM with jobs in flight, held-lock model.** The same with `--model held`: the "
        "jobs cut short at the end of the grace have their transactions rolled back, which "
        "gives the attempt back too."
    ),
    "retries": (
        "**Retries.** (a) {flaky} jobs whose handler fails with p = 0.3, max_attempts 4, "
        "ExponentialBackoff(base=0.5, jitter=0.25): attempts never exceed the maximum, a "
        "`failed` job had exactly 4 failing executions and none after, and each retry starts "
        "no earlier than its band's lower edge after the failure (never early); how late "
        "past the band's upper edge they start, waiting behind the jobs due earlier, is "
        "reported. (b) A herd of {herd} jobs "
        "claimed and failed in one statement, with delays drawn by their task's policy "
        "ExponentialBackoff(base=4, jitter=0.5) (band 2-6 s), then run by 2 workers: the "
        "largest number of retries planned (run_at) and started (ledger) in any sliding "
        "one-second window; lockstep would put all {herd} in one second."
    ),
    "bigids": (
        "**Ids past 2^31.** The jobs' identity restarted at 2^31 and at 2^53 + 1: enqueue, "
        "claim, finish, fail (retry and final), snooze, heartbeat, release, reclaim, "
        "cancel of a running job, admin retry and cancel, get; then lease and held-lock "
        "workers drain {jobs} jobs each (30 % fail their first attempt and retry) with ids "
        "past 2^31. Checks: every id round-trips exactly, in the rows, the ledger and the "
        "workers' logs."
    ),
}

DEFINITIONS = """\
## What the columns mean

Every handler writes one row to a ledger table (job id, attempt, worker id, pid, start and end
time, outcome) on its own connection, in its own transaction, so what ran is known independently
of the jobs table. After the queue drains, the checker (Jepsen `total-queue` accounting) reports:

- **lost**: enqueued and never completed nor failed: the row is gone or cancelled, or `done`
  although no execution of the job ever returned. Must be 0.
- **stuck**: still `running`, `pending` or `scheduled` when the drain deadline passed. Must be 0.
- **stale writes accepted**: a final row written by a claim that no longer owned the job (a newer
  attempt of the job ran, or the claim the row names never returned the outcome the row shows).
  In the race scenario it is measured directly on the SQL statements. Must be 0.
- **duplicates**: executions beyond one per job (executions that failed on purpose excepted).
  skiplock is at-least-once: a fault can make a job run again. Reported, and checked against the
  **bound** the faults explain: the jobs the hit workers were running at each fault (from the
  ledger: started, and not yet returned or not yet reported written by the worker's log, since
  a held-lock job runs until its transaction commits; for leases, also the rows they still
  held), plus outcomes refused because a live worker's lease had been reclaimed, plus jobs
  released at shutdown.
- **recovery p50 / p99**: from each fault to each job it interrupted running again (ledger
  times); for faults that interrupted no job, to the hit worker running a job again.
"""


FAILOVER_EXPLANATION = (
    "**Primary failover** (`failover-async`, `failover-on`, `failover-remote-apply`, and "
    "`failover-on-held` with held-lock workers). A scratch "
    "primary and a streaming standby of it (`pg_basebackup -R`, Debian's binaries, free ports, "
    "a temporary directory; never the shared server), asynchronous or with the standby in "
    "`synchronous_standby_names` and `synchronous_commit = on` / `remote_apply`. Two lease "
    "workers (concurrency 4, lease 2 s) and a producer (about {rate} enqueues/s, each retried "
    "with its idempotency key until it returns) use one multi-host DSN, "
    "`host=127.0.0.1,127.0.0.1 port=P1,P2 target_session_attrs=read-write`; {jobs} jobs of "
    "10-60 ms are preloaded. After {run:g} s the primary stops with `pg_ctl stop -m immediate`; "
    "for the {lag:g} s before that the standby receives nothing (iptables drops its "
    "replication connection's packets until it is promoted), as a standby that lags would. "
    "{detect:g} s after the failure (an HA manager's decision, at its quickest) the standby is "
    "promoted (`pg_ctl promote`); the old primary never comes back. The ledger is on another "
    "server, out of the failover's reach. Reported: acknowledged enqueues lost (returned an "
    "id, row gone on the new primary), outcomes rolled back (a worker logged the job done "
    "before the failure, and it ran again after), forgotten claims run again (a lease claim "
    "commits without waiting for its WAL, see docs/worker.md: one the standby had not received "
    "is gone, its job runs again with the same attempt number and the first run's outcome is "
    "refused), and failure → promoted → first claim on the new primary. Checks with "
    "synchronous replication: nothing lost, stuck or stale, every acknowledged enqueue done, "
    "no reported outcome rolled back, duplicates within the bound; asynchronously: nothing "
    "stuck, no enqueue acknowledged before the lag lost, duplicates within the bound plus the "
    "outcomes rolled back. Both workers go on without a restart. Asynchronously, the "
    "enqueues acknowledged during the lag are lost and the outcomes written during it rolled "
    "back. Synchronously nothing acknowledged is lost, but many jobs run twice: lease claims "
    "commit without waiting (for the disk or the standby), so the workers go on claiming and "
    "running jobs while their outcome writes wait for the standby; the standby never gets "
    "those claims, so after the promotion the jobs are pending again and run a second time, "
    "and the waiting outcomes are refused (`forgotten_claims_run_again`, "
    "`late_writes_rejected`). Held-lock workers claim in the job's own transaction, which "
    "commits with its outcome and so waits for the standby: only the jobs running at the "
    "failure run again, after their task's retry backoff (their worker counts the attempt "
    "whose commit failed), which is the held-lock row's long recovery."
)


def cell(value: object) -> str:
    return "—" if value is None else str(value)


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def table(results: list[Result]) -> str:
    lines = [
        "| scenario | jobs | faults injected | lost | stuck | stale writes accepted | "
        "duplicates (bound) | recovery p50 / p99 | wall time | checks |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in results:
        dup = "—" if r.duplicates is None else f"{r.duplicates} ({cell(r.bound)})"
        rec = "—" if not r.recovery else f"{seconds(r.p50)} / {seconds(r.p99)}"
        ok = "pass" if not r.failures else f"**FAIL** ({len(r.failures)})"
        lines.append(
            f"| {r.title} | {r.jobs} | {r.faults} | {cell(r.lost)} | {cell(r.stuck)} | "
            f"{cell(r.stale)} | {dup} | {rec} | {r.wall:.0f} s | {ok} |"
        )
    return "\n".join(lines)


def explanation(key: str, full: bool) -> str:
    base = key.split("-")[0] if key not in SIZES else key
    if base == "failover":
        return FAILOVER_EXPLANATION.format(**SIZES[base][1 if full else 0])
    size = dict(SIZES.get(base, ({}, {}))[1 if full else 0])
    if "every" in size:
        size["every"] = "-".join(f"{v:g}" for v in size["every"])
    if "down" in size:
        size["down"] = "-".join(f"{v:g}" for v in size["down"])
    if base == "stop":
        size["jobs_per_round"] = size["jobs"]
    if base.startswith("blackhole"):
        t = size["timeouts"]
        size["timeouts_text"] = (
            f"keepalives after {t['keepalives_idle']} s idle, every {t['keepalives_interval']} s,"
            f" {t['keepalives_count']} probes, user timeout {t['tcp_user_timeout'] / 1000:g} s "
            "(set in the DSN: shorter than skiplock's defaults, for speed)"
            if t
            else "skiplock's defaults (keepalives after 5 s idle, every 2 s, 3 probes; user "
            "timeout 10 s)"
        )
    return EXPLANATIONS[key].format(**size)


def render(results: list[Result], full: bool, command: str, took: float) -> str:
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    mode = "full" if full else "quick"
    out = [
        "# Reliability: the fault-injection suite",
        "",
        "skiplock's `tests/chaos/` runs real `skiplock worker` processes against real PostgreSQL "
        "and injects faults: SIGKILL, SIGSTOP/SIGCONT, SIGTERM, `pg_terminate_backend`, "
        "connections gone silent (packets dropped), PostgreSQL restarts (fast and immediate), "
        "and races at the SQL level. CI runs the "
        "quick mode (`pytest tests/chaos`); this page is the full mode, regenerated by:",
        "",
        f"    {command}",
        "",
        f"Generated {date} ({mode} mode, {took / 60:.1f} min) on {platform.node() or 'a host'} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}). The box was shared with other work, so "
        "timings are indicative only; the correctness figures (lost, stuck, stale) are not.",
        "",
        table(results),
        "",
        DEFINITIONS,
        "## The scenarios",
        "",
    ]
    for r in results:
        out.append(f"- {explanation(r.key, full)}")
    out += ["", "## Details per scenario", ""]
    for r in results:
        out.append(f"- **{r.key}**: " + "; ".join(f"{k} = {v}" for k, v in r.notes.items()))
        for failure in r.failures:
            out.append(f"  - check failed: {failure}")
    out += [
        "",
        "## Notes",
        "",
        f"- Sizes ({mode} mode): "
        + "; ".join(
            f"{name}: " + ", ".join(f"{k} {v}" for k, v in SIZES[name][1 if full else 0].items())
            for name in SIZES
        )
        + ". The quick mode CI runs (`pytest tests/chaos`) uses smaller sizes, spares the "
        "leader in the kill-lease scenario (kill-leader covers it) and skips terminate-held.",
        "- Fixed since the first full run (each kept by a test): at a graceful stop the "
        "completer's last write was cut short and written again, reporting finished jobs "
        "`outcome=lost` (`test_shutdown_does_not_report_a_written_outcome_as_lost`); only the "
        "maintenance leader reclaimed expired leases, so a killed leader's jobs waited for its "
        "role to expire (10 s) and the `kill-leader` row failed; a reclaimed job was given "
        "`run_at = now()` and waited behind the backlog.",
        "- A frozen worker cannot stop anything: the SIGSTOP overlap is the freeze. A worker "
        "stops a running handler once a heartbeat finds its lease reclaimed (async: cancelled; "
        "sync: `ctx.cancelled`), which shortens the double run of jobs that outlast the "
        "worker's loss of touch (`stop-long`; `tests/integration/test_lost_leases.py`); "
        "a held-lock worker stops a handler whose session ended within a second "
        "(`terminate-held-long`; `tests/integration/test_held_sessions.py`); "
        "the other scenarios' handlers end before that.",
        "",
    ]
    return "\n".join(out)


def section(doc: str, begin: str, end: str) -> str:
    """The section of a docs/reliability.md between two markers (included), or ''."""
    at, to = doc.find(begin), doc.find(end)
    if at < 0 or to < 0:
        return ""
    return doc[at : to + len(end)]


def failover_section(doc: str) -> str:
    """The failover section of a docs/reliability.md (markers included), or ''."""
    return section(doc, FAILOVER_BEGIN, FAILOVER_END)


def render_failover(results: list[Result], full: bool, command: str) -> str:
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        FAILOVER_BEGIN,
        "## Primary failover",
        "",
        f"Regenerated by `{command}` ({date}, {'full' if full else 'quick'} mode, "
        f"{os.cpu_count()} CPUs, a shared box); CI runs the quick mode "
        "(`tests/chaos/test_failover.py`). What each setting guarantees is in "
        "[operations.md](operations.md#high-availability-failover).",
        "",
        table(results),
        "",
        "- " + explanation("failover", full),
        "",
    ]
    for r in results:
        out.append(f"- **{r.key}**: " + "; ".join(f"{k} = {v}" for k, v in r.notes.items()))
        for failure in r.failures:
            out.append(f"  - check failed: {failure}")
    out.append(FAILOVER_END)
    return "\n".join(out)


def write_failover(path: Path, text: str) -> None:
    """Replace the failover section of the doc (or add it before its Notes)."""
    write_section(path, text, FAILOVER_BEGIN, FAILOVER_END)


def write_section(path: Path, text: str, begin: str, end: str) -> None:
    """Replace the section between the markers (or add it before the doc's Notes)."""
    doc = path.read_text()
    old = section(doc, begin, end)
    if old:
        doc = doc.replace(old, text)
    else:
        at = doc.find("\n## Notes")
        doc = doc[:at] + "\n" + text + "\n" + doc[at:] if at >= 0 else doc + "\n" + text
    path.write_text(doc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="full sizes; writes the doc")
    parser.add_argument("--dsn", default=os.environ.get("SKIPLOCK_TEST_DSN"))
    parser.add_argument("--only", help="comma-separated scenario names: " + ", ".join(SCENARIOS))
    parser.add_argument("--write", action="store_true", help="write the doc in quick mode too")
    parser.add_argument("--out", type=Path, default=DOC)
    parser.add_argument(
        "--failover", action="store_true", help="the primary failover scenarios instead"
    )
    args = parser.parse_args()
    if not args.dsn:
        parser.error("give --dsn or set SKIPLOCK_TEST_DSN")
    known = FAILOVER_SCENARIOS if args.failover else SCENARIOS
    names = [n.strip() for n in args.only.split(",")] if args.only else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(known)}")
    results: list[Result] = []
    began = time.time()
    for name in names:
        print(f"== {name} ({'full' if args.full else 'quick'})", flush=True)
        try:
            result = known[name](args.dsn, args.full)
        except Exception as exc:
            traceback.print_exc()
            result = Result(name, name, 0, "—", failures=[f"crashed: {exc!r}"])
        print(f"   {result.summary()}", flush=True)
        for failure in result.failures:
            print(f"   CHECK FAILED: {failure}", flush=True)
        results.append(result)
    took = time.time() - began
    command = "python tests/chaos/run.py" + (" --full" if args.full else "") + " --dsn DSN"
    print()
    print(table(results))
    if args.failover and (args.full or args.write):
        command = command.replace("run.py", "run.py --failover")
        write_failover(args.out, render_failover(results, args.full, command))
        print(f"\nwrote the failover section of {args.out}")
    elif args.full or args.write:
        doc = args.out.read_text() if args.out.exists() else ""
        kept = failover_section(doc)
        hosts = section(doc, HOSTS_BEGIN, HOSTS_END)
        args.out.write_text(render(results, args.full, command, took))
        if kept:
            write_failover(args.out, kept)
        if hosts:
            write_section(args.out, hosts, HOSTS_BEGIN, HOSTS_END)
        print(f"\nwrote {args.out}")
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
