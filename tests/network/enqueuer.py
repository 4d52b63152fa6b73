"""An enqueuer on a "host": run in a network namespace by the scenarios (scenarios.py), it
enqueues ``--count`` chaos ``work`` jobs through the host's proxy in batches, and prints one JSON
line with their ids and the seconds it took.

    ip netns exec NS python tests/network/enqueuer.py --dsn DSN --schema S --count 300
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "chaos"))

import chaos_app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--ms", type=float, default=2.0)
    args = parser.parse_args()
    app = chaos_app.build(args.dsn, args.schema)
    ids: list[int] = []
    t0 = time.monotonic()
    try:
        for start in range(0, args.count, args.batch):
            k = min(args.batch, args.count - start)
            ids += [e.id for e in app.enqueue_many("work", [{"ms": args.ms}] * k)]
    finally:
        app.close()
    print(json.dumps({"ids": ids, "seconds": time.monotonic() - t0}), flush=True)


if __name__ == "__main__":
    main()
