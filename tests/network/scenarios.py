"""Many hosts and a host cut off (issue 47, part 1): the scenarios behind test_many_hosts.py,
quick there, full by command:

    python tests/network/scenarios.py --full [--only many-hosts,cut] [--dsn DSN]

prints each scenario's figures as JSON (the ones in docs/reliability.md, "Many hosts").  Root
only (network namespaces, iptables: bench/hosts.py).

* ``many_hosts``: 3 hosts x 2 worker processes drain one queue while enqueuers on two of the
  hosts add the jobs; the chaos ledger checks every job ran exactly once.  Full mode also runs
  the same jobs on one host (2 processes), for the throughput against one host.  Connections
  are sampled from pg_stat_activity while it runs, per host by the client port each backend's
  connection comes from (the host's proxy owns that socket).
* ``cut_host``: 3 hosts (1 worker process each; 2 in full mode) drain; the host of the
  maintenance leader is cut off (every packet into and out of its namespace dropped), then
  restored.  Checks: its leased jobs are reclaimed by the others within lease + a bound, its
  late outcomes are rejected (``outcome=lost``), nothing lost or stuck, duplicates within the
  checker's bound; the leader terms (the holder of the ``leaders`` row, sampled, and each
  worker's "is now / is no longer the leader" lines) never overlap; a periodic task's ticks are
  each enqueued once.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
for folder in (HERE, HERE.parent / "chaos", HERE.parent, ROOT):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import psycopg  # noqa: E402
from bench.hosts import Host, Hosts  # noqa: E402
from chaos_harness import ChaosRun, check, socket_owner, with_params  # noqa: E402
from psycopg import sql  # noqa: E402

LEADER_RE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(\S+) (is now|is no longer)"
    r" the maintenance leader",
    re.MULTILINE,
)


def _log_time(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


class ConnectionSampler:
    """Samples, every ``every`` seconds in a thread, the run's worker sessions (pool and
    listener) per host: the most seen at once."""

    def __init__(self, run: ChaosRun, hosts: list[Host], every: float = 0.25) -> None:
        self.run = run
        self.hosts = hosts
        self.every = every
        self.most: dict[str, int] = defaultdict(int)  # host name -> sessions
        self.most_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        with psycopg.connect(self.run.dsn, autocommit=True) as conn:
            while not self._stop.wait(self.every):
                rows = conn.execute(
                    "SELECT pid, client_port FROM pg_stat_activity WHERE client_port IS NOT NULL"
                    " AND (application_name = %s OR (application_name = 'skiplock-listener'"
                    " AND (query LIKE %s OR pid IN (SELECT pid FROM pg_locks WHERE"
                    " locktype = 'advisory' AND classid = hashtext(%s)::oid))))",
                    (
                        self.run.app_name,
                        f"%skiplock.{self.run.schema}%",
                        f"skiplock_idle/skiplock.{self.run.schema}",  # its idle mark
                    ),
                ).fetchall()
                ports = {int(port): int(pid) for pid, port in rows}
                by_proxy = socket_owner(ports, [h.proxy.pid for h in self.hosts])
                seen: Counter[str] = Counter()
                for backend in by_proxy:
                    proxy = by_proxy[backend]
                    seen[next(h.name for h in self.hosts if h.proxy.pid == proxy)] += 1
                for name, n in seen.items():
                    self.most[name] = max(self.most[name], n)
                self.most_total = max(self.most_total, len(rows))


def _enqueue_on(run: ChaosRun, host: Host, count: int, ms: float) -> subprocess.Popen[str]:
    dsn = with_params(host.dsn, application_name=f"{run.app_name}_enqueuer")
    return subprocess.Popen(
        host.command(sys.executable, str(HERE / "enqueuer.py"), "--dsn", dsn,
                     "--schema", run.schema, "--count", str(count), "--ms", str(ms)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _drain_on_hosts(
    dsn: str, n_hosts: int, processes: int, jobs: int, rtt: float, ms: float
) -> dict[str, Any]:
    hosts = Hosts(dsn, n_hosts, rtt)
    run = ChaosRun(dsn, f"hosts{n_hosts}")
    try:
        procs = [
            run.start_worker(concurrency=8, lease=10.0, dsn=host.dsn, prefix=host.command())
            for host in hosts.hosts
            for _ in range(processes)
        ]
        run.wait_started(procs, timeout=60)
        enqueuing_hosts = hosts.hosts[:2]
        with ConnectionSampler(run, hosts.hosts) as sampler:
            enqueuers = [
                _enqueue_on(run, host, jobs // len(enqueuing_hosts), ms) for host in enqueuing_hosts
            ]
            ids: list[int] = []
            enqueue_s = []
            for e in enqueuers:
                out, err = e.communicate(timeout=300)
                if e.returncode != 0:
                    raise RuntimeError(f"an enqueuer failed: {err[-2000:]}")
                got = json.loads(out.strip().splitlines()[-1])
                ids += got["ids"]
                enqueue_s.append(got["seconds"])
            drained = run.wait_drained(300)
        found = check(run, ids)
        ledger = run.ledger()
        first = min(e.started for e in ledger)
        last = max(e.ended or e.started for e in ledger)
        per_proc = Counter(e.pid for e in ledger)
        codes = run.stop_all()
        return {
            "hosts": n_hosts,
            "processes_per_host": processes,
            "rtt_ms": rtt,
            "jobs": len(ids),
            "drained": drained,
            "lost": len(found.lost),
            "stuck": len(found.stuck),
            "stale": len(found.stale),
            "duplicates": found.duplicates,
            "executions": found.executions,
            "jobs_per_s": len(ids) / (last - first),
            "enqueue_s": enqueue_s,
            "executions_per_process": sorted(per_proc.values()),
            "sessions_per_host_most": dict(sampler.most),
            "sessions_per_process_most": max(sampler.most.values(), default=0) / processes,
            "sessions_total_most": sampler.most_total,
            "exit_codes": sorted(set(codes.values()), key=str),
        }
    finally:
        run.close()
        hosts.close()


def many_hosts(dsn: str, full: bool) -> dict[str, Any]:
    jobs = 6000 if full else 600
    rtt = 5.0 if full else 2.0
    out = {"three": _drain_on_hosts(dsn, 3, 2, jobs, rtt, ms=2.0)}
    if full:
        out["one"] = _drain_on_hosts(dsn, 1, 2, jobs, rtt, ms=2.0)
        out["three_over_one"] = out["three"]["jobs_per_s"] / out["one"]["jobs_per_s"]
    return out


# -- a host cut off --------------------------------------------------------------------------


class LeaderSampler:
    """The holder of the ``leaders`` row (role maintenance, unexpired), sampled every 0.1 s."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.samples: list[tuple[float, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> LeaderSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        query = sql.SQL(
            "SELECT holder FROM {} WHERE role = 'maintenance' AND expires_at > now()"
        ).format(self.run.table("leaders"))
        with psycopg.connect(self.run.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.1):
                row = conn.execute(query).fetchone()
                self.samples.append((time.time(), None if row is None else str(row[0])))

    def terms(self) -> list[tuple[str, float, float]]:
        """(holder, first seen, last seen) of each run of samples with the same holder."""
        out: list[tuple[str, float, float]] = []
        for t, holder in self.samples:
            if holder is None:
                continue
            if out and out[-1][0] == holder:
                out[-1] = (holder, out[-1][1], t)
            else:
                out.append((holder, t, t))
        return out


def believed_terms(run: ChaosRun, until: float) -> list[tuple[str, float, float]]:
    """(worker, from, to) of each stretch a worker said it was the maintenance leader."""
    terms = []
    for proc in run.workers:
        began: float | None = None
        for m in LEADER_RE.finditer(proc.stderr):
            at = _log_time(m[1])
            if m[3] == "is now":
                began = at
            elif began is not None:
                terms.append((m[2], began, at))
                began = None
        if began is not None:
            terms.append((proc.worker_id or proc.name, began, until))
    return sorted(terms, key=lambda t: t[1])


def overlaps(terms: list[tuple[str, float, float]]) -> list[tuple[str, str, float]]:
    """Pairs of terms of different holders that overlap, and by how long."""
    found = []
    for i, (a, a0, a1) in enumerate(terms):
        for b, b0, b1 in terms[i + 1 :]:
            if a != b and min(a1, b1) > max(a0, b0):
                found.append((a, b, round(min(a1, b1) - max(a0, b0), 2)))
    return found


def cut_host(dsn: str, full: bool) -> dict[str, Any]:
    cut_s = 30.0 if full else 3.0
    rtt = 5.0 if full else 2.0
    lease = 5.0 if full else 2.0
    processes = 2 if full else 1
    jobs = 6000 if full else 800
    hosts = Hosts(dsn, 3, rtt)
    run = ChaosRun(dsn, "cut")
    try:
        with LeaderSampler(run) as leaders:
            procs = [
                run.start_worker(concurrency=4, lease=lease, dsn=host.dsn, prefix=host.command(),
                                 env={"CHAOS_PERIODIC": "1"})
                for host in hosts.hosts
                for _ in range(processes)
            ]  # fmt: skip
            host_of = {p.name: hosts.hosts[i // processes] for i, p in enumerate(procs)}
            run.wait_started(procs, timeout=60)
            # Jobs long enough that the drain outlasts the cut: ~2 cut lengths of work.
            slots = 3 * processes * 4
            ms = max(20.0, 2 * cut_s * 1000 * slots / jobs)
            ids = run.enqueue("work", [{"ms": ms} for _ in range(jobs)])
            time.sleep(1.0 + lease)  # running, and a leader elected
            leader_id = run.leader()
            victim = next(
                (host_of[p.name] for p in procs if p.worker_id == leader_id), hosts.hosts[0]
            )
            hit = [p for p in procs if host_of[p.name] is victim]
            held = set().union(*(run.jobs_held_by(p) for p in hit))
            cut_at = time.time()
            victim.cut()
            time.sleep(cut_s)
            victim.restore()
            restored_at = time.time()
            drained = run.wait_drained(300)
            time.sleep(1.0)
        found = check(run, ids)
        jobs_now = run.jobs()
        # When each job the cut host held ran again elsewhere (ledger), after the cut.
        by_job = defaultdict(list)
        for e in run.ledger():
            by_job[e.job_id].append(e)
        hit_pids = {p.pid for p in hit}
        reran = [
            min(e.started for e in by_job[j] if e.pid not in hit_pids and e.started > cut_at)
            - cut_at
            for j in held
            if any(e.pid not in hit_pids and e.started > cut_at for e in by_job[j])
        ]
        late = sum(1 for p in hit for _, _, outcome in p.finished() if outcome == "lost")
        until = time.time()
        believed = believed_terms(run, until)
        ticks = _periodic_ticks(run)
        codes = run.stop_all()
        return {
            "rtt_ms": rtt,
            "lease_s": lease,
            "cut_s": cut_s,
            "workers": len(procs),
            "jobs": len(ids),
            "job_ms": ms,
            "drained": drained,
            "lost": len(found.lost),
            "stuck": len(found.stuck),
            "stale": len(found.stale),
            "duplicates": found.duplicates,
            "duplicate_bound": len(held) + found.late_rejected,
            "held_by_cut_host": len(held),
            "held_rerun_elsewhere": len(reran),
            "held_rerun_after_cut_s_max": max(reran, default=None),
            "late_outcomes_rejected": late,
            "leader_was_cut": leader_id in {p.worker_id for p in hit},
            "leader_terms_db": [
                (h, round(a - cut_at, 2), round(b - cut_at, 2)) for h, a, b in leaders.terms()
            ],
            "leader_terms_believed": [
                (h, round(a - cut_at, 2), round(b - cut_at, 2)) for h, a, b in believed
            ],
            "leader_overlaps_believed": overlaps(believed),
            "restored_after_s": restored_at - cut_at,
            "periodic_ticks": ticks,
            "statuses": dict(Counter(r["status"] for r in jobs_now.values())),
            "exit_codes": sorted(set(codes.values()), key=str),
        }
    finally:
        run.close()
        hosts.close()


def _periodic_ticks(run: ChaosRun) -> dict[str, int]:
    """Runs of each tick of the chaos app's periodic task (the ledger, by job).  Only ticks
    made over 2 s before: the workers still run, and a tick made just now may not have run yet
    (the queue is otherwise drained, so 2 s is ample for one that will)."""
    rows = run.db.execute(
        sql.SQL(
            "SELECT id FROM {} WHERE task = 'tick' AND created_at < now() - interval '2 seconds'"
        ).format(run.table("jobs"))
    ).fetchall()
    tick_jobs = {r[0] for r in rows}
    runs = Counter(e.job_id for e in run.ledger() if e.job_id in tick_jobs)
    return {"ticks": len(tick_jobs), "run_twice": sum(1 for n in runs.values() if n > 1),
            "never_ran": len(tick_jobs - set(runs))}  # fmt: skip


SCENARIOS = {"many-hosts": many_hosts, "cut": cut_host}
DOC = ROOT / "docs" / "reliability.md"


def render(results: dict[str, dict[str, Any]], full: bool) -> str:
    """The "Many hosts" section of docs/reliability.md, markers included."""
    from run import HOSTS_BEGIN, HOSTS_END  # tests/chaos/run.py

    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        HOSTS_BEGIN,
        "## Many hosts",
        "",
        f"Regenerated by `python tests/network/scenarios.py{' --full' if full else ''}` "
        f"({date}, {'full' if full else 'quick'} mode, {os.cpu_count()} CPUs, a box shared with "
        "other work: timings are indicative only); CI runs the quick mode "
        "(`tests/network/test_many_hosts.py`). Each host is a network namespace reaching the "
        "server through a delaying proxy of its own (bench/hosts.py); the chaos ledger says "
        "what ran.",
        "",
    ]
    many = results.get("many-hosts")
    if many:
        out += [
            "| hosts x processes | RTT ms | jobs | lost | stuck | stale | run twice "
            "| jobs/s | sessions per process (most) | exit codes |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for key in ("three", "one"):
            r = many.get(key)
            if r:
                out.append(
                    f"| {r['hosts']} x {r['processes_per_host']} | {r['rtt_ms']:g} | {r['jobs']} "
                    f"| {r['lost']} | {r['stuck']} | {r['stale']} | {r['duplicates']} "
                    f"| {r['jobs_per_s']:,.0f} | {r['sessions_per_process_most']:g} "
                    f"| {r['exit_codes']} |"
                )
        if "three_over_one" in many:
            out += ["", f"Three hosts drained at {many['three_over_one']:.2f}x one host's rate."]
        out += [
            "",
            "Jobs of 2 ms, concurrency 8, enqueued by two enqueuers on two of the hosts while "
            "the workers run; jobs/s is first start to last end in the ledger, whose two writes "
            "per job go through the host's proxy one at a time per process, so it is the "
            "ledger's rate as much as skiplock's. Sessions per process: the most pooled and "
            "LISTEN sessions of one host at once (by the client port of each backend, which "
            "the host's proxy owns), divided by its processes.",
            "",
        ]
    cut = results.get("cut")
    if cut:
        c = cut
        out += [
            f"**A host cut off.** 3 hosts at RTT {c['rtt_ms']:g} ms, {c['workers']} worker "
            f"processes (concurrency 4, lease {c['lease_s']:g} s), {c['jobs']} jobs of "
            f"{c['job_ms']:g} ms and a periodic task every second; the maintenance leader's host "
            f"(leader: {c['leader_was_cut']}) had every packet in and out dropped (iptables in "
            f"its namespace) for {c['restored_after_s']:.1f} s, then restored. Lost "
            f"{c['lost']}, stuck {c['stuck']}, stale writes accepted {c['stale']}; run twice "
            f"{c['duplicates']} (bound {c['duplicate_bound']}: the {c['held_by_cut_host']} jobs "
            f"the cut host held plus its late outcomes); its late outcomes rejected on "
            f"reconnect: {c['late_outcomes_rejected']}; of its jobs, {c['held_rerun_elsewhere']} "
            "ran again on the other hosts, the last "
            + (
                f"{c['held_rerun_after_cut_s_max']:.1f} s after the cut"
                if c["held_rerun_after_cut_s_max"] is not None
                else "(none)"
            )
            + f" (the lease {c['lease_s']:g} s, the reclaim interval and a claim). Leader terms "
            f"(seconds from the cut) by the `leaders` row: {c['leader_terms_db']}; as each "
            f"worker logged them: {c['leader_terms_believed']}; overlapping: "
            f"{c['leader_overlaps_believed'] or 'none'} (before a leader's term ended by its own "
            "clock, docs/design.md, the cut leader counted itself leader until the network came "
            "back, 20.6 s into the next one's term). Periodic ticks (each run once: run_twice 0, "
            f"never_ran 0): {c['periodic_ticks']}. "
            f"Statuses at the end: {c['statuses']}, exit codes {c['exit_codes']}.",
            "",
        ]
    out.append(HOSTS_END)
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = "postgresql://postgres@127.0.0.1:5432/test"
    parser.add_argument("--dsn", default=os.environ.get("SKIPLOCK_TEST_DSN", default))
    parser.add_argument("--full", action="store_true", help="full sizes; writes the doc")
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--write", action="store_true", help="write the doc in quick mode too")
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    for name in args.only.split(","):
        t0 = time.monotonic()
        results[name] = SCENARIOS[name](args.dsn, args.full)
        print(json.dumps({name: results[name], "seconds": time.monotonic() - t0}, default=str))
    if args.full or args.write:
        from run import HOSTS_BEGIN, HOSTS_END, write_section

        write_section(DOC, render(results, args.full), HOSTS_BEGIN, HOSTS_END)
        print(f"wrote the many-hosts section of {DOC}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
