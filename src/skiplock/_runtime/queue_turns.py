"""The order in which a worker's next claim takes turns between its queues.

A claim across several queues takes the first job of each queue in the order given, then the
second of each, and so on (see ``job_claim_from_queues`` in jobs.sql); a queue of weight w takes
w turns for a queue of weight 1.  Which queue comes first changes from one claim to the next
(smooth weighted round-robin: each queue comes first in proportion to its weight, spread out
evenly; with equal weights, the queues in turn), which decides the shares when claims are small
(a held-lock slot claims one job).  docs/design.md, "Fair shares: queues take turns".
"""

from __future__ import annotations

from collections.abc import Mapping


class QueueTurns:
    def __init__(self, weights: Mapping[str, int] | None = None) -> None:
        self.weights: dict[str, int] = dict(weights or {})
        self._credit: dict[str, int] = {}  # smooth weighted round-robin's current weights

    def weight(self, queue: str) -> int:
        return self.weights.get(queue, 1)

    def next(self, queues: list[str]) -> list[str]:
        """``queues`` rotated to start at the queue whose turn it is to come first."""
        if len(queues) < 2:
            return queues
        credit = self._credit
        total = 0
        for queue in queues:
            credit[queue] = credit.get(queue, 0) + self.weight(queue)
            total += self.weight(queue)
        first = max(range(len(queues)), key=lambda i: (credit[queues[i]], -i))
        credit[queues[first]] -= total
        return queues[first:] + queues[:first]
