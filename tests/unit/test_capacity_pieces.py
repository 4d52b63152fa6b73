"""Claims in pieces (docs/design.md, "Claims in pieces"): while its slots have work a leasing
worker claims PIECE jobs at a time, or more when its server is far away."""

from __future__ import annotations

import pytest

from helpers.claim_drain import drain
from helpers.fake_clock import FakeClock
from skiplock._runtime.capacity import CLAIM_TIMES_KEPT, PIECE, Capacity, Throughput


def _busy_capacity(round_trip: float | None, claim_seconds: float, claim_jobs: int) -> Capacity:
    """A worker draining 30,000 jobs/s whose last claims each took ``claim_seconds`` for
    ``claim_jobs``, its round trip timed at ``round_trip`` (None: not yet)."""
    clock = FakeClock()
    meter = Throughput(window=1.0, clock=clock)
    for _ in range(10):
        meter.add(3000)
        clock.now += 0.1
    cap = Capacity(10, 500, horizon=0.1, throughput=meter)
    for _ in range(CLAIM_TIMES_KEPT):
        cap.claim_took(claim_seconds, claim_jobs)
    if round_trip is not None:
        cap.round_trip_took(round_trip)
    return cap


def test_no_piece_before_the_round_trip_and_the_claims_are_timed() -> None:
    assert _busy_capacity(None, 0.0135, 500).piece() is None
    cap = Capacity(10, 500)
    cap.round_trip_took(0.0003)
    cap.claim_took(0.0135, 500)  # one claim is not enough to tell its cost per job
    assert cap.piece() is None


def test_a_server_close_by_gets_pieces_of_piece_jobs() -> None:
    cap = _busy_capacity(0.0003, 0.0135, 500)
    assert cap.piece() == PIECE
    # slots busy, half the reserve left: room for a piece, so a piece now (not the room)
    assert cap.to_claim(active=10, reserved=250, unwritten=0) == PIECE
    # less room than a piece: not yet
    assert cap.to_claim(active=10, reserved=310, unwritten=0) == 0
    # the claim loop is woken as soon as there is room for a piece
    target = 10 + 500
    assert cap.refill_below() == target - PIECE + 1


def test_a_far_server_gets_pieces_that_make_the_round_trip_a_third_of_a_claim() -> None:
    # 20 ms away: a claim of 255 jobs took 26 ms, 6 ms of it the jobs' (about 24 us a job)
    cap = _busy_capacity(0.020, 0.026, 255)
    per_job = (0.026 - 0.020) / 255
    assert cap.piece() == pytest.approx(2 * 0.020 / per_job, rel=0.01)
    # more than the room: the worker claims as before, once half the target is missing
    assert cap.to_claim(active=10, reserved=250, unwritten=0) == 0
    assert cap.to_claim(active=10, reserved=240, unwritten=0) == 260
    assert cap.refill_below() == 510 - 510 // 2 + 1


def test_a_starved_worker_still_claims_its_whole_room() -> None:
    cap = _busy_capacity(0.0003, 0.0135, 500)
    # a free slot and nothing reserved: the room, as before (larger than a piece here)
    assert cap.to_claim(active=0, reserved=0, unwritten=0) == PIECE
    small = _busy_capacity(0.0003, 0.0135, 500)
    small.prefetch = 100  # room for less than a piece: all of it at once
    assert small.to_claim(active=0, reserved=0, unwritten=0) == 110


def _backlog(pieces: bool, *, fixed: float = 0.002, per_job: float = 22e-6) -> tuple[float, float]:
    """A simulated backlog: slots that run 80,000 jobs/s fed by claims, one at a time, that each
    take ``fixed + per_job x jobs``, sized by the capacity's arithmetic (with the round trip
    timed, ``pieces``, or not).  Returns the drain's jobs per second and the 99th percentile of
    how long a job enqueued at a random moment waits for the claim that brings it."""
    clock = FakeClock()
    start = clock.now
    cap = Capacity(10, 500, horizon=0.1, throughput=Throughput(clock=clock))
    if pieces:
        cap.round_trip_took(fixed / 4)  # an empty statement is quicker than a claim's start
    jobs = 100_000
    run = drain(
        cap,
        clock,
        lambda n: fixed + per_job * n,
        jobs=jobs,
        service=80_000,
        step=0.0001,
        slots_busy=True,
    )
    # a job enqueued at t is brought by the first claim sent after t
    waits = []
    claim = 0
    t = start + 0.5  # past the ramp
    while t < run.back_at[-1]:
        while claim < len(run.sent_at) and run.sent_at[claim] < t:
            claim += 1
        if claim >= len(run.back_at):
            break
        waits.append(run.back_at[claim] - t)
        t += 0.0007
    waits.sort()
    return jobs / run.seconds, waits[int(0.99 * len(waits))]


def test_pieces_bring_a_new_job_sooner_and_keep_the_drain() -> None:
    whole_rate, whole_wait = _backlog(pieces=False)
    piece_rate, piece_wait = _backlog(pieces=True)
    piece_time = 0.002 + 22e-6 * PIECE
    # the wait: the next send (at most a piece's claim away) and that claim
    assert piece_wait <= 2 * piece_time + 0.001
    assert piece_wait < 0.9 * whole_wait
    assert piece_rate >= 0.9 * whole_rate
