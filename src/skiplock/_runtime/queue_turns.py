"""The order in which a worker's next claim takes turns between its queues.

A claim across several queues takes the first job of each queue in the order given, then the
second of each, and so on (see ``job_claim_from_queues`` in jobs.sql); rotating that order
from one claim to the next gives each queue the first turn as often as the others, which
matters when claims are small (a held-lock slot claims one job).  docs/design.md, "Fair
shares: queues take turns".
"""

from __future__ import annotations


class QueueTurns:
    def __init__(self) -> None:
        self._claims = 0

    def next(self, queues: list[str]) -> list[str]:
        """``queues`` rotated by one more place than at the previous claim."""
        if len(queues) < 2:
            return queues
        shift = self._claims % len(queues)
        self._claims += 1
        return queues[shift:] + queues[:shift]
