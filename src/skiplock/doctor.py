"""``skiplock doctor``: look at a live database and say what needs doing, and how.

Each check gives one :class:`Finding`: ``ok``, ``warn`` (needs attention: the queue works but
degrades, or will) or ``fail`` (broken now, or about to be).  The command exits 1 when any
finding is at or above ``--fail-on`` (default ``warn``), else 0; it cannot connect: 1 with one
``error:`` line.  The checks, with the rules in :class:`Thresholds`:

- ``schema``: skiplock's tables exist and every migration is applied;
- ``xmin_horizon``: sessions of this database whose transaction (holding an xid or snapshot)
  is older than ``transaction_seconds`` keep vacuum from removing dead rows everywhere, held-lock
  jobs included; ``fail`` past 10 times that;
- ``visibility``: doctor can only judge sessions it may see (superuser or ``pg_monitor``);
- ``autovacuum``: autovacuum is on for the server (``warn`` when off);
- ``dead_tuples``: per queue table, dead rows at least ``dead_tuples`` and ``dead_ratio`` of
  the live ones (``fail`` when more dead than live), or autovacuum disabled on the table;
- ``workers``: every queue with due jobs has a live worker (one that reported itself in the
  ``workers`` table within ``SILENT_AFTER`` seconds), and no silent worker still has jobs
  running under its name;
- ``expired_leases``: running jobs whose lease ran out more than ``lease_grace`` seconds ago:
  nobody reclaims them (the maintenance leader does, every few seconds);
- ``impossible_states``: jobs in states no statement of skiplock writes (``fail``): running
  without a lease (never reclaimed) or finished without a finish time (never pruned);
- ``claim_index``: ``jobs_claim_idx`` exists, is valid, and is not bloated: bloated means at
  least ``index_min_bytes`` and over ``index_factor`` times the size its pending entries need
  (``INDEX_ENTRY_BYTES`` each); any other invalid index on the jobs table (a failed
  ``CREATE INDEX CONCURRENTLY`` / ``REINDEX CONCURRENTLY`` leftover) is reported too;
- ``retention``: finished jobs older than their status's retention plus ``retention_grace``
  (pruning is behind, or no worker runs maintenance);
- ``locks``: sessions holding locks that delay claims: an advisory lock on one of skiplock's
  keys of the schema in a session that may not write the jobs table, or rows of the
  ``queues`` table (a limited queue's claim lock) in a transaction older than
  ``lock_seconds`` (see :mod:`skiplock.doctor_locks`);
- ``listen``: a notification sent from a second connection reaches a listening one within
  ``listen_timeout`` seconds (a transaction-mode pooler breaks this);
- ``connections``: free connection slots for at least two more worker processes
  (``connections_per_worker`` each, see docs/operations.md); ``fail`` below one.

The pieces: :mod:`skiplock.doctor_findings` (:class:`Finding`, :class:`Thresholds`),
:mod:`skiplock.doctor_runner` (:class:`Doctor`, which runs the checks of
:mod:`skiplock.doctor_upkeep`, :mod:`skiplock.doctor_vacuum`, :mod:`skiplock.doctor_locks` and
:mod:`skiplock.doctor_server`)
and :mod:`skiplock.doctor_cli` (the command).  This module gathers what other code imports.
"""

from __future__ import annotations

from .doctor_cli import command
from .doctor_findings import COUNT_CAP, STATUS_ORDER, Finding, Status, Thresholds, worst
from .doctor_runner import Doctor
from .doctor_server import APPLICATION_NAME, probe_listen
from .doctor_vacuum import INDEX_ENTRY_BYTES

__all__ = [
    "APPLICATION_NAME",
    "COUNT_CAP",
    "INDEX_ENTRY_BYTES",
    "STATUS_ORDER",
    "Doctor",
    "Finding",
    "Status",
    "Thresholds",
    "command",
    "probe_listen",
    "worst",
]
