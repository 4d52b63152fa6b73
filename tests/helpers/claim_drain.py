"""A simulated drain for the claim arithmetic's tests: slots fed by claims sent one at a time,
each sized by a :class:`~skiplock._runtime.capacity.Capacity` and taking a time that may
depend on its size."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from helpers.fake_clock import FakeClock
from skiplock._runtime.capacity import Capacity


@dataclass
class Drain:
    seconds: float  # from the first claim to the last job run
    sent_at: list[float] = field(default_factory=list)  # each claim's send
    back_at: list[float] = field(default_factory=list)  # and return


def drain(
    cap: Capacity,
    clock: FakeClock,
    claim_seconds: Callable[[int], float],
    *,
    jobs: int,
    service: float,
    step: float,
    slots_busy: bool = False,
) -> Drain:
    """Run ``jobs`` jobs at ``service`` a second through ``cap``'s claims.  ``slots_busy``: the
    first ``concurrency`` jobs held count as running, not reserved (the claim loop's view)."""
    start = clock.now
    out = Drain(0.0)
    left, reserved, done = jobs, 0, 0
    arriving: tuple[float, int, float] | None = None  # the claim in flight: return, jobs, time
    while done < jobs:
        if arriving is not None and clock.now >= arriving[0] - 1e-12:
            reserved += arriving[1]
            cap.claim_took(arriving[2], arriving[1])
            out.back_at.append(clock.now)
            arriving = None
        if arriving is None and left:
            active = min(cap.concurrency, reserved) if slots_busy else 0
            want = min(cap.to_claim(active, reserved - active, 0), left)
            if want:
                left -= want
                took = claim_seconds(want)
                arriving = (clock.now + took, want, took)
                out.sent_at.append(clock.now)
        ran = min(reserved, int(service * step))
        reserved -= ran
        done += ran
        if ran:
            cap.throughput.add(ran)
        clock.now += step
    out.seconds = clock.now - start
    return out
