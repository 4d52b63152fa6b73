"""What the claim loop asks of a worker's slots, whichever kind they are.

Leased slots (:mod:`skiplock._runtime.leased_slots`) claim many jobs in one committed statement
and run them one after another, the extra ones reserved; held-lock slots
(:mod:`skiplock._runtime.held_slots`) claim one job each, in the transaction that runs it.  The
claim loop decides when to claim and caps how many; the slots decide how.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Slots(Protocol):
    def room(self, unwritten: int) -> int:
        """How many jobs to claim now, with ``unwritten`` outcomes not yet written."""
        ...

    async def claim(self, queues: list[str], limit: int) -> int:
        """Claim up to ``limit`` jobs from ``queues`` into the slots; returns how many."""
        ...

    def start_waiting(self) -> None:
        """Room freed: start claimed jobs that wait for a slot, if any."""
        ...

    def give_back_waiting(self) -> None:
        """At shutdown: give the jobs that wait for a slot back to their queues."""
        ...

    def let_go_idle(self) -> list[asyncio.Task[None]]:
        """At shutdown: let idle slots end; returns their tasks."""
        ...

    async def close(self) -> None:
        """After shutdown: return what the slots hold of the pool."""
        ...
