"""PGQueuer's worker, started the way ``pgq run`` starts it, through its public ``pgqueuer.run``.

``pgq run`` itself cannot start with typer 0.29 (``--log-level`` reaches PGQueuer's logging
setup as a plain string); this does what that command does: the same ``run`` coroutine with the
same options, on uvloop when installed, SIGTERM/SIGINT stopping it gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta

import pgqueuer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("factory", nargs="?", default="bench.apps.pgqueuer_app:factory")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--dequeue-timeout", type=float, default=30.0)
    parser.add_argument("--max-concurrent-tasks", type=int, default=None)
    args = parser.parse_args()
    coro = pgqueuer.run(
        args.factory,
        batch_size=args.batch_size,
        dequeue_timeout=timedelta(seconds=args.dequeue_timeout),
        max_concurrent_tasks=args.max_concurrent_tasks,
    )
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


if __name__ == "__main__":
    main()
