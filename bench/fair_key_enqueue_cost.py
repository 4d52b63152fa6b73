"""What giving a fair_key's turn costs an enqueue: one round of the tree on ``PYTHONPATH``.

    PYTHONPATH=<tree>/src python -m bench.fair_key_enqueue_cost [--dsn DSN]

In a throwaway schema holding a backlog of 10,000 jobs of one fair key, times batches of 1,000
jobs of a new key each (``enqueue_many``), the same without a key (the control), and single keyed
jobs; 15 of each, the median of the last 12.  Prints one JSON line of milliseconds.  Compare
trees by running rounds of each in turn (e.g. ``git archive HEAD~1 src | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
from collections.abc import Callable

from bench.db import default_dsn
from skiplock import App

ROUNDS, WARM = 15, 3


def median_ms(run: Callable[[int], object]) -> float:
    times = []
    for r in range(ROUNDS):
        started = time.perf_counter()
        run(r)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times[WARM:]) * 1e3, 2)


def one_round(dsn: str) -> dict[str, float]:
    app = App(dsn, f"bench_fair_{secrets.token_hex(4)}")
    app.migrate()

    @app.task(name="work", queue="fq")
    def work(n: int = 0) -> None: ...

    batch = [{"n": i} for i in range(1000)]
    try:
        work.with_options(fair_key="big").enqueue_many([{"n": i} for i in range(10_000)])
        return {
            "keyed_batch_ms": median_ms(
                lambda r: work.with_options(fair_key=f"k{r}").enqueue_many(batch)
            ),
            "unkeyed_batch_ms": median_ms(lambda r: work.enqueue_many(batch)),
            "keyed_single_ms": median_ms(
                lambda r: work.with_options(fair_key=f"s{r}").enqueue(n=1)
            ),
        }
    finally:
        app.sync_client.drop_schema()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = default_dsn()
    parser.add_argument("--dsn", default=default)
    args = parser.parse_args()
    print(json.dumps(one_round(args.dsn)))


if __name__ == "__main__":
    main()
