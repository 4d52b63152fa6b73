"""Where a skiplock worker's time goes in a drain: py-spy's samples of its processes, by part.

    python -m bench.profile [--dsn DSN] [--setting default] [--jobs 200000] [--out DIR]

Preloads JOBS no-op jobs in a fresh database (the benchmark's, dropped after), starts the
setting's workers as the drain workload does, attaches ``py-spy record`` to them, and checks, as
the drain does, that every job ran exactly once. It prints the share of the samples that fell in
each part of the worker (claiming, decoding claimed rows, running jobs, writing outcomes, ...)
with the innermost frames that took most of it (``--top``), and keeps the collapsed stacks in
``DIR/profile-<n>.txt`` for a flame graph (``flamegraph.pl``, speedscope). py-spy stops the
worker for each sample (with ``--nonblocking`` samples caught stacks half-changed: 16-18% of
them fell in no part, against 6% this way), so its jobs/s are not the benchmark's: this says
where a worker's time goes, ``python -m bench`` how much there is of it. py-spy counts a process
that waits for a CPU as busy, so on a machine with more runnable processes than cores the parts
include time spent waiting to run. py-spy must be allowed to trace the workers: root, or a
``kernel.yama.ptrace_scope`` of 0; else it fails, and this says what it said.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from .db import BenchDatabase, default_dsn
from .plan import make_plan
from .systems import SYSTEMS
from .workloads import Attach, Context, drain

# The parts of a worker, each named by frames that only it has on the stack; a sample goes to
# the first part with one of its frames (so decoding is told apart from the claim around it).
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("start-up (imports, schema check)", ("<frozen importlib", "Worker._check_schema")),
    ("decoding claimed rows into jobs", ("Job.from_claimed_row",)),
    (
        "claiming (statement, waiting for it)",
        ("ClaimLoop.run (", "LeasedClaims.", "HeldSlots._claim"),
    ),
    ("outcome writes: parameters", ("claim_arrays", "result_arrays")),
    ("outcome writes: reporting them", ("OutcomeReporter.recorded",)),
    ("outcome writes: statement", ("Completer.",)),
    ("running jobs (slots, handler, outcome)", ("_run_slot", "run_leased", "_run_held")),
    ("heartbeat, listener, maintenance", ("Heartbeat.", "Listener.", "Maintenance.", "Leader")),
    ("event loop: waiting in select", ("EpollSelector.select", "KqueueSelector.select")),
]
OTHER = "other (event loop, shutdown)"


def read_collapsed(lines: Iterable[str]) -> Counter[tuple[str, ...]]:
    """py-spy's raw output (``frame;frame;... count`` per line) as stacks and sample counts."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in lines:
        line = line.strip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def part_of(stack: tuple[str, ...]) -> str:
    for name, marks in PARTS:
        if any(mark in frame for frame in stack for mark in marks):
            return name
    return OTHER


def shares(stacks: Counter[tuple[str, ...]]) -> list[tuple[str, int, float]]:
    """Samples per part, most first: (part, samples, share of all samples)."""
    by_part: Counter[str] = Counter()
    for stack, n in stacks.items():
        by_part[part_of(stack)] += n
    total = sum(by_part.values()) or 1
    return [(part, n, n / total) for part, n in by_part.most_common()]


def heaviest_frames(stacks: Counter[tuple[str, ...]], part: str, n: int) -> list[tuple[str, int]]:
    """The ``n`` innermost frames with the most samples of ``part``: where inside it the time
    went.  A frame is shown without its file's directories (``Job._from_row (job.py:85)``)."""
    frames: Counter[str] = Counter()
    for stack, count in stacks.items():
        if part_of(stack) == part:
            frames[_short(stack[-1])] += count
    return frames.most_common(n)


def _short(frame: str) -> str:
    if frame.startswith("process "):  # py-spy's root frame, with the command line (and DSN)
        return frame.partition(":")[0]
    name, paren, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1]}" if paren else frame


def py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("py-spy not found: pip install -r bench/requirements.txt")
    return found


def attach_py_spy(out: Path, rate: int, files: list[Path]) -> Attach:
    """A drain hook: record each worker process (and its children) until it exits."""
    program = py_spy()

    def attach(pids: list[int]) -> Callable[[], None]:
        spies = []
        for pid in pids:
            path = out / f"profile-{len(files)}.txt"
            files.append(path)
            cmd = [program, "record", "--pid", str(pid), "--subprocesses"]
            cmd += ["--rate", str(rate), "--format", "raw", "--output", str(path)]
            spies.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

        def detach() -> None:
            for spy in spies:  # each ends when its process has exited
                _, err = spy.communicate(timeout=60)
                if spy.returncode != 0:
                    raise RuntimeError(f"py-spy failed: {err.decode(errors='replace').strip()}")

        return detach

    return attach


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None, help="server (default: $SKIPLOCK_DATABASE_URL)")
    parser.add_argument("--database", default="skiplock_profile", help="created, then dropped")
    parser.add_argument("--setting", default="default", help="a skiplock setting of the bench")
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--out", default=None, help="where the collapsed stacks go")
    parser.add_argument("--top", type=int, default=3, help="heaviest frames shown per part")
    args = parser.parse_args(argv)
    plan = make_plan(quick=False, repeat=1)
    every = plan.drain_settings + plan.big_drain_settings + plan.work_settings  # + real work
    settings = {s.label: s for s in every if s.system == "skiplock"}
    if args.setting not in settings:
        parser.error(f"--setting: one of {', '.join(sorted(settings))}")
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    db = BenchDatabase(args.dsn or default_dsn(), args.database)
    ctx = Context(db, Path(tempfile.mkdtemp(prefix="bench-logs-")), quick=False)
    files: list[Path] = []
    try:
        result = drain(
            ctx,
            SYSTEMS["skiplock"],
            settings[args.setting],
            args.jobs,
            attach=attach_py_spy(out, args.rate, files),
        )
    finally:
        db.drop()
    stacks: Counter[tuple[str, ...]] = Counter()
    for path in files:
        stacks.update(read_collapsed(path.read_text().splitlines()))
    print(
        f"skiplock/{args.setting}: {args.jobs:,} jobs, {result['jobs_per_s']:,.0f} jobs/s under"
        f" py-spy, worker CPU {result['worker_cpu_us_per_job']:.1f} µs/job,"
        f" verified: {'yes' if result['verified'] else 'NO ' + '; '.join(result['problems'])}"
    )
    total = sum(stacks.values())
    print(f"{total:,} samples at {args.rate}/s; collapsed stacks in {out}")
    for part, n, share in shares(stacks):
        print(f"{share:6.1%}  {n:7,}  {part}")
        for frame, count in heaviest_frames(stacks, part, args.top):
            print(f"{'':6}  {count:7,}    {frame}")
    return 0 if result["verified"] and total else 1


if __name__ == "__main__":
    raise SystemExit(main())
