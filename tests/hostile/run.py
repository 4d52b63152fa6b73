"""Run the hostile fuzz suite at full size and print what it tried, by kind.

    python tests/hostile/run.py --full --dsn postgresql://postgres@127.0.0.1:5432/test

Without ``--full`` it runs CI's quick size (40 inputs per test); ``--examples N`` picks any
size.  The table it prints is the one kept in docs/security.md.  Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FULL_EXAMPLES = 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help=f"{FULL_EXAMPLES} inputs per test")
    parser.add_argument("--examples", type=int, help="inputs per test")
    parser.add_argument("--dsn", help="the server (default: $SKIPLOCK_TEST_DSN, else embedded)")
    args = parser.parse_args()
    examples = args.examples or (FULL_EXAMPLES if args.full else 40)
    with tempfile.TemporaryDirectory() as folder:
        tally = Path(folder) / "tally.json"
        env = {**os.environ, "SKIPLOCK_FUZZ_EXAMPLES": str(examples)}
        env["SKIPLOCK_FUZZ_TALLY"] = str(tally)
        if args.dsn:
            env["SKIPLOCK_TEST_DSN"] = args.dsn
        started = time.monotonic()
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(HERE)]
        done = subprocess.run(command, env=env, cwd=HERE.parent.parent, check=False)
        seconds = time.monotonic() - started
        counts = json.loads(tally.read_text()) if tally.exists() else {}
    print(f"\n{examples} generated inputs per test, {seconds:.0f} s, pytest exit {done.returncode}")
    print("\n| what | count |\n|---|---|")
    for kind, count in sorted(counts.items()):
        print(f"| {kind} | {count} |")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
