"""``skiplock demo`` as a real process: ``--quick --json`` against the test server.

One run (module fixture, with ``--plot``) is checked from several sides: the three dequeue
patterns behave as the design notes say, every job of part 2 is accounted for after two worker
processes were killed, and the demo's schema is gone afterwards.  A second run is interrupted
with SIGINT in the middle of part 2 and must still drop its schema.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers.polling import wait_for

pytestmark = pytest.mark.slow

DEMO_TIMEOUT = 180


def demo_command(pg_dsn: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "skiplock", "demo", "--quick", "--dsn", pg_dsn, *args]


def clean_env() -> dict[str, str]:
    """The environment without SKIPLOCK_* settings that could change the demo's workers."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}


@pytest.fixture(scope="module")
def demo(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    plot = tmp_path_factory.mktemp("demo") / "patterns.png"
    started = time.monotonic()
    proc = subprocess.run(
        demo_command(pg_dsn, "--json", "--plot", str(plot)),
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results: dict[str, Any] = json.loads(proc.stdout)  # only JSON on stdout
    results["_plot"] = plot
    results["_stderr"] = proc.stderr
    results["_wall"] = time.monotonic() - started
    return results


def runs(demo: dict[str, Any], pattern: str) -> dict[int, dict[str, Any]]:
    found = {r["workers"]: r for r in demo["patterns"] if r["pattern"] == pattern}
    assert sorted(found) == [1, 2, 4, 8], found
    return found


# -- part 1 ------------------------------------------------------------------------------


def test_every_pattern_ran_with_one_to_eight_workers_on_the_same_job_set(
    demo: dict[str, Any],
) -> None:
    sizes = {r["jobs"] for r in demo["patterns"]}
    assert len(sizes) == 1 and sizes.pop() >= 20
    for r in demo["patterns"]:
        assert r["unfinished"] == 0, r
        assert r["claims"] == r["jobs"] + r["duplicates"], r
        assert r["claims_per_s"] > 0 and r["seconds"] > 0


def test_naive_select_then_update_claims_jobs_twice_with_several_workers(
    demo: dict[str, Any],
) -> None:
    naive = runs(demo, "naive")
    assert naive[1]["duplicates"] == 0  # alone, nobody can take a job from under you
    assert naive[8]["duplicates"] > 0, naive
    assert sum(1 for n in (2, 4, 8) if naive[n]["duplicates"] > 0) >= 2, naive


def test_for_update_and_skip_locked_never_claim_a_job_twice(demo: dict[str, Any]) -> None:
    for pattern in ("for_update", "skip_locked"):
        for n, r in runs(demo, pattern).items():
            assert r["duplicates"] == 0, (pattern, n, r)
            assert r["claims"] == r["jobs"]


def test_for_update_waits_for_the_head_row_and_skip_locked_never_waits(
    demo: dict[str, Any],
) -> None:
    for_update, skip = runs(demo, "for_update"), runs(demo, "skip_locked")
    assert for_update[1]["wait_seconds"] == 0 and skip[1]["wait_seconds"] == 0
    for n in (2, 4, 8):
        assert for_update[n]["wait_seconds"] > 0, for_update[n]
        assert skip[n]["wait_seconds"] < 0.05, skip[n]
    # With eight workers, seven of them queue behind the lock most of the run.
    assert for_update[8]["wait_seconds"] > for_update[8]["seconds"]
    assert for_update[8]["claim_ms"] > skip[8]["claim_ms"]


def test_plot_is_a_png_chart(demo: dict[str, Any]) -> None:
    plot: Path = demo["_plot"]
    data = plot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000


# -- part 2 ------------------------------------------------------------------------------


def test_every_job_of_part_two_is_accounted_for(demo: dict[str, Any]) -> None:
    work = demo["at_work"]
    assert work["lost"] == 0 and work["stuck"] == 0, work
    assert work["enqueued"] == work["done"] + work["failed"], work
    assert work["failed"] == 1  # the warehouse call that fails on every attempt
    jobs = work["enqueued"] - 4  # the images; plus two order jobs and two crash-test jobs
    uploads = jobs // 20
    assert jobs >= 100 and uploads >= 5
    # Each upload fails twice before it works; the warehouse job is retried twice, then fails.
    assert work["retried"] == 2 * uploads + 2, work


def test_killed_workers_jobs_were_recovered_and_ran_again(demo: dict[str, Any]) -> None:
    work = demo["at_work"]
    assert work["recovered_lease"] is True, work
    assert work["recovered_held"] is True, work
    # A lease job cannot come back before its (1 s) lease has run out.
    assert work["lease_recovery_seconds"] >= 0.5, work
    assert work["held_recovery_seconds"] is not None
    # Both killed runs had started (their side effects happened): at-least-once.
    assert work["duplicates"] >= 2, work


def test_rolled_back_transactional_enqueue_left_no_job(demo: dict[str, Any]) -> None:
    assert demo["at_work"]["rolled_back_enqueue_absent"] is True


def test_demo_schema_is_dropped_and_the_quick_run_is_quick(
    demo: dict[str, Any], pg_dsn: str
) -> None:
    assert demo["schema"].startswith("skiplock_demo_") and demo["kept"] is False
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", [demo["schema"]]
        ).fetchone()
    assert row == (0,)
    assert demo["_wall"] < 90, "--quick is meant for CI: a few seconds"


# -- Ctrl-C ------------------------------------------------------------------------------


def demo_schemas(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'skiplock\\_demo\\_%'"
    ).fetchall()
    return {r[0] for r in rows}


def _ctrl_c_as_in_a_terminal() -> None:
    """In the demo's process, before it starts: SIGINT's default action, as in a terminal.  A
    program started in the background by a shell without job control (``cmd &`` in a script,
    as CI may run these tests) inherits SIGINT ignored, and Python then keeps ignoring it: the
    demo would run to its end, as it should there."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_the_middle_of_part_two_still_drops_the_schema(
    pg_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        before = demo_schemas(conn)
        log = (tmp_path / "demo.log").open("w+")
        proc = subprocess.Popen(
            demo_command(pg_dsn),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            preexec_fn=_ctrl_c_as_in_a_terminal,
        )
        try:

            def part_two() -> str | None:
                for name in demo_schemas(conn) - before:
                    # Part 2 has begun once its tables exist.
                    query = "SELECT to_regclass(%s) IS NOT NULL"
                    if conn.execute(query, [f"{name}.demo_orders"]).fetchone() == (True,):
                        return name
                assert proc.poll() is None, "part 2 never started: the demo exited"
                return None

            schema = wait_for(part_two, 60, "part 2 to start")
            found = time.monotonic()
            time.sleep(0.7)  # the doomed workers are up, the fleet is busy
            assert proc.poll() is None, "the demo ended before the Ctrl-C"
            proc.send_signal(signal.SIGINT)
            # Said if the demo goes on regardless: when the signal came, after the tables.
            sent = f"SIGINT sent {time.monotonic() - found:.2f}s after part 2's tables appeared\n"
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.seek(0)
            output = log.read()
            log.close()
        assert proc.returncode != 0, sent + output[-3000:]
        assert schema not in demo_schemas(conn), output[-3000:]


def test_part_two_numbers_its_jobs_from_one_and_a_pipe_gets_whole_sentences(
    demo: dict[str, Any],
) -> None:
    """Part 2's jobs are the first of its table (part 1's are gone): the story reads "order 1
    ... its jobs 1, 2".  Without a terminal, no sentence is wrapped at 80 columns."""
    err = demo["_stderr"]
    assert "order 1 committed in one transaction with its jobs 1, 2\n" in err, err
    assert re.search(r"^Each run: .* while holding it\.", err, re.M), err
    assert re.search(
        r"^.*held-lock worker killed: job recovered .*counted the dead attempt\)", err, re.M
    ), err
