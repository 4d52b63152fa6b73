"""A worker's claimer: the optional capability through which a worker claims from a backend.

A worker claims again and again, and a backend may keep state between its claims (where the
next one starts reading, a connection, what it learned of the limits).  So a worker asks its
backend for a :class:`Claimer` once (``claimer_of(backend, settings)``), claims through it, and
closes it when it stops.  A backend offers one by a method ``claimer(settings) -> Claimer``
(PostgreSQL's: :class:`skiplock.backends.postgres_claimer.PostgresClaimer`); a backend without
it gets :class:`PlainClaimer`, which calls its :meth:`~skiplock.backends.base.Backend.claim`.
Either way a claimer's claims keep ``claim``'s contract (docs/backends.md, "Claimers").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from skiplock.backends.base import Backend
from skiplock.job import ClaimKey, Job


class Cursor(Protocol):
    """Where a worker's claims start reading its queues (a backend may ignore it)."""

    def start(self) -> Mapping[str, ClaimKey]: ...

    def advance(self, claimed: Sequence[Job], want: int) -> None: ...


@dataclass(frozen=True)
class ClaimerSettings:
    """What a worker tells its backend's claimer: who claims, for how long, and its hints."""

    worker_id: str
    lease_seconds: float
    # Queue -> weight: the share of a claim's turns each queue takes (None: equal shares).
    weights: Mapping[str, int] | None = None
    # The worker's claim cursor; its claim loop restarts it when work appears behind it.
    cursor: Cursor | None = None
    # Whether some key has limits now (the worker's reading of it): a backend may skip its
    # claim of limited keys' jobs while none has.  Unknown (None): look every time.
    keys_limited: Callable[[], bool] | None = field(default=None, compare=False)


@runtime_checkable
class Claimer(Protocol):
    """One worker's claims from a backend, one at a time."""

    async def claim(self, queues: Sequence[str], limit: int, startable: int) -> list[Job]:
        """As :meth:`Backend.claim` for the settings' worker and lease: up to ``limit`` jobs of
        ``queues`` (turns in their order); of keys with limits no more than ``startable``
        (the jobs the worker could start now; ``startable <= limit``)."""
        ...

    async def close(self) -> None:
        """Let go of what the claimer keeps (its connection); no claim follows."""
        ...


class PlainClaimer:
    """The claimer of a backend that offers none: each claim is one ``backend.claim``."""

    def __init__(self, backend: Backend, settings: ClaimerSettings) -> None:
        self.backend = backend
        self.settings = settings

    async def claim(self, queues: Sequence[str], limit: int, startable: int) -> list[Job]:
        settings = self.settings
        return await self.backend.claim(queues, limit, settings.worker_id, settings.lease_seconds)

    async def close(self) -> None:
        return None


def claimer_of(backend: Backend, settings: ClaimerSettings) -> Claimer:
    """The backend's claimer for a worker: its own when it offers one, else a plain one."""
    offer = getattr(backend, "claimer", None)
    if offer is None:
        return PlainClaimer(backend, settings)
    claimer: Claimer = offer(settings)
    return claimer
