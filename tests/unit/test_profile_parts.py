"""bench/profile.py reads py-spy's collapsed stacks and counts each sample in one part of the
worker: the first part (in PARTS order) with a frame of its on the stack."""

from __future__ import annotations

from bench.profile import OTHER, heaviest_frames, part_of, read_collapsed, shares

ROOT = ('process 41:"python -m skiplock worker app"', "<module> (skiplock/__main__.py:5)")
CLAIM = "LeasedClaims._claim_on (skiplock/_runtime/leased_claims.py:75)"
DECODE = "Job.from_claimed_row (skiplock/job.py:76)"
WRITE = "Completer._write_batch (skiplock/_runtime/completer.py:150)"
PARAMS = "claim_arrays (skiplock/_db/statement_params.py:28)"
RECORDED = "OutcomeReporter.recorded (skiplock/_runtime/job_outcomes.py:136)"
SLOT = "LeasedSlots._run_slot (skiplock/_runtime/leased_slots.py:159)"
SELECT = "EpollSelector.select (selectors.py:468)"


def stack(*frames: str) -> tuple[str, ...]:
    return (*ROOT, *frames)


def line(*frames: str, count: int) -> str:
    return ";".join(stack(*frames)) + f" {count}\n"


def test_reads_stacks_and_counts_and_adds_repeated_stacks() -> None:
    lines = [line(CLAIM, count=7), "\n", line(CLAIM, count=3), line(SLOT, "x (a b:1)", count=2)]
    stacks = read_collapsed(lines)
    assert stacks[stack(CLAIM)] == 10
    assert stacks[stack(SLOT, "x (a b:1)")] == 2  # a frame with spaces in it stays whole


def test_decoding_is_told_apart_from_the_claim_around_it() -> None:
    assert part_of(stack(CLAIM, DECODE)) == "decoding claimed rows into jobs"
    assert part_of(stack(CLAIM, "AsyncCursor.execute (psycopg/cursor_async.py:113)")) == (
        "claiming (statement, waiting for it)"
    )


def test_a_write_is_split_into_its_parameters_reporting_and_statement() -> None:
    assert part_of(stack(WRITE, PARAMS)) == "outcome writes: parameters"
    assert part_of(stack(WRITE, RECORDED)) == "outcome writes: reporting them"
    assert part_of(stack(WRITE, "wait_async (psycopg/waiting.py:213)")) == (
        "outcome writes: statement"
    )


def test_running_jobs_waiting_in_select_and_the_rest() -> None:
    assert part_of(stack(SLOT, "noop (bench/apps/skiplock_app.py:24)")) == (
        "running jobs (slots, handler, outcome)"
    )
    assert part_of(stack(SELECT)) == "event loop: waiting in select"
    # The root's "<module> (skiplock/__main__.py:5)" is on every stack: it is no import.
    assert part_of(stack("Handle._run (asyncio/events.py:80)")) == OTHER
    importing = "_find_and_load (<frozen importlib._bootstrap>:1176)"
    assert part_of(stack(importing, CLAIM)) == "start-up (imports, schema check)"


def test_shares_sum_to_one_most_first() -> None:
    stacks = read_collapsed(
        [line(CLAIM, count=6), line(WRITE, count=3), line(CLAIM, DECODE, count=1)]
    )
    got = shares(stacks)
    assert [(part, n) for part, n, _ in got] == [
        ("claiming (statement, waiting for it)", 6),
        ("outcome writes: statement", 3),
        ("decoding claimed rows into jobs", 1),
    ]
    assert abs(sum(share for _, _, share in got) - 1.0) < 1e-9


def test_heaviest_frames_of_a_part_innermost_first_without_directories() -> None:
    fetch = "AsyncCursor.fetchall (/venv/lib/python3.11/site-packages/psycopg/cursor_async.py:284)"
    send = "BaseCursor._send_query_prepared (/venv/psycopg/_cursor_base.py:602)"
    stacks = read_collapsed(
        [
            line(CLAIM, fetch, count=5),
            line(CLAIM, send, count=2),
            line(CLAIM, DECODE, count=9),  # another part: not counted for the claim
            line(WRITE, send, count=4),  # another part again
        ]
    )
    assert heaviest_frames(stacks, "claiming (statement, waiting for it)", 3) == [
        ("AsyncCursor.fetchall (cursor_async.py:284)", 5),
        ("BaseCursor._send_query_prepared (_cursor_base.py:602)", 2),
    ]
    assert heaviest_frames(stacks, "outcome writes: statement", 1) == [
        ("BaseCursor._send_query_prepared (_cursor_base.py:602)", 4)
    ]
    assert heaviest_frames(stacks, "claiming (statement, waiting for it)", 0) == []


def test_a_process_frame_is_shown_without_its_command_line() -> None:
    stacks = read_collapsed([";".join(ROOT[:1]) + " 3"])  # sampled between Python frames
    assert heaviest_frames(stacks, OTHER, 1) == [("process 41", 3)]
