"""``python -m bench.profile``: a real drain of a real worker under py-spy.  It must verify the
drain (every job once) and find samples in the parts that any drain has: claiming, decoding the
claimed rows, running jobs and writing their outcomes."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def ptrace_refused() -> str | None:
    """Why py-spy could not attach to the workers, if it could not: it is no ancestor of them,
    so it needs root or Yama's ptrace_scope 0 (no Yama: the same user may)."""
    if os.geteuid() == 0:
        return None
    try:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    except OSError:
        return None
    return None if scope == "0" else f"py-spy needs root or ptrace_scope 0 (it is {scope})"


def test_profile_of_a_default_worker_drain(pg_dsn: str, tmp_path: Path) -> None:
    reason = ptrace_refused()
    if reason is not None:
        pytest.skip(reason)
    database = f"skiplock_profile_test_{secrets.token_hex(4)}"  # the profile drops it
    args = ["--dsn", pg_dsn, "--database", database, "--jobs", "20000", "--rate", "1000"]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.profile", *args, "--out", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "20,000 jobs" in proc.stdout and "verified: yes" in proc.stdout, proc.stdout
    parts = dict(
        (m[2], int(m[1].replace(",", "")))
        for m in re.finditer(r"^\s*[\d.]+%\s+([\d,]+)  (.+)$", proc.stdout, re.M)
    )
    for part in (
        "claiming (statement, waiting for it)",
        "decoding claimed rows into jobs",
        "running jobs (slots, handler, outcome)",
        "outcome writes: statement",
    ):
        assert parts.get(part, 0) > 0, proc.stdout
    # Under each part, the innermost frames that took most of it (--top, 3 by default).
    frames = re.findall(r"^ {8}\s*[\d,]+    (\S.*)$", proc.stdout, re.M)
    assert any("Job" in frame for frame in frames), proc.stdout
    stacks = list(tmp_path.glob("profile-*.txt"))
    assert stacks and all(p.stat().st_size > 0 for p in stacks)
