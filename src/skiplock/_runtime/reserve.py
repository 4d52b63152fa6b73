"""A leasing worker's reserve: the jobs it has claimed that wait for a slot, in the order they
start.

Within a queue, by priority, then in the order they were claimed: a higher-priority job claimed
now starts at the next free slot, before the jobs of its queue claimed ahead of it.  Across
queues, by turns (smooth weighted round-robin over the queues with jobs reserved, their weights
the claim's); whenever a queue joins or leaves that set the turns start over, the queue that
joined last first: a job of a queue with nothing reserved starts at the next free slot too,
not after the other queues' reserve (docs/design.md, "Better jobs start before the reserve").
An entity key needs nothing here: a claim never takes a key's job while another of its jobs
is claimed.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator, Mapping

from skiplock._runtime.running import RunningJob


class _QueueReserve:
    """One queue's reserved jobs: a deque per priority, the priorities in a heap."""

    __slots__ = ("by_priority", "priorities")

    def __init__(self) -> None:
        self.by_priority: dict[int, deque[RunningJob]] = {}
        self.priorities: list[int] = []

    def push(self, running: RunningJob) -> None:
        priority = running.job.priority
        jobs = self.by_priority.get(priority)
        if jobs is None:
            jobs = self.by_priority[priority] = deque()
            heapq.heappush(self.priorities, priority)
        jobs.append(running)

    def pop(self) -> RunningJob:
        priority = self.priorities[0]
        jobs = self.by_priority[priority]
        running = jobs.popleft()
        if not jobs:
            del self.by_priority[priority]
            heapq.heappop(self.priorities)
        return running

    def __iter__(self) -> Iterator[RunningJob]:
        for priority in sorted(self.by_priority):
            yield from self.by_priority[priority]


class Reserve:
    """Claimed jobs waiting for a slot; :meth:`popleft` gives the one to start next."""

    def __init__(self, weights: Mapping[str, int] | None = None) -> None:
        self.weights: Mapping[str, int] = weights or {}
        self._queues: dict[str, _QueueReserve] = {}  # the queues with jobs reserved, oldest first
        self._credit: dict[str, int] = {}  # smooth weighted round-robin's current weights
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[RunningJob]:
        for jobs in list(self._queues.values()):
            yield from list(jobs)

    def append(self, running: RunningJob) -> None:
        queue = running.job.queue
        jobs = self._queues.get(queue)
        if jobs is None:
            jobs = self._queues[queue] = _QueueReserve()
            self._credit.clear()  # the turns start over, this queue first
        jobs.push(running)
        self._count += 1

    def popleft(self) -> RunningJob:
        queues = self._queues
        if not queues:
            raise IndexError("pop from an empty reserve")
        queue = next(iter(queues)) if len(queues) == 1 else self._turn()
        jobs = queues[queue]
        running = jobs.pop()
        self._count -= 1
        if not jobs.priorities:
            del queues[queue]
            self._credit.clear()
        return running

    def _turn(self) -> str:
        """The queue whose turn it is (ties to the queue that joined last)."""
        credit, weights = self._credit, self.weights
        total, best, best_credit = 0, "", 0
        for queue in self._queues:
            weight = weights.get(queue, 1)
            total += weight
            mine = credit[queue] = credit.get(queue, 0) + weight
            if not best or mine >= best_credit:
                best, best_credit = queue, mine
        credit[best] -= total
        return best
