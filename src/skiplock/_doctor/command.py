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
- ``dead_tuples``: per table of the schema (the jobs, the archive, the held-lock and key-limit
  bookkeeping, progress, the charts' counts...; each shown with its size), dead rows at
  least ``dead_tuples`` and ``dead_ratio`` of the live ones (``fail`` when more dead than live),
  or autovacuum disabled on the table;
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
- ``archive``: the archive's size, and its oldest job against the archive's retention (plus
  ``retention_grace``, and a day for a partitioned archive, which drops whole days); for a
  partitioned archive, daily partitions made for today on and none of its jobs in the
  default partition;
- ``locks``: sessions holding skiplock's locks, each once with the keys it holds, and what
  they can still do: a held-lock marker (an advisory lock) of the schema in a session that may
  not write the jobs table (it delays no claim of this version; workers of earlier versions
  count it), the schema's migration lock held by a session older than ``lock_seconds`` (a
  ``skiplock migrate`` with work gives up after its ``--lock-wait``), or rows of the ``queues``
  table (a limited queue's claim lock, whose claims are passed over while it is held) in a
  transaction older than ``lock_seconds`` (see :mod:`skiplock._doctor.locks`);
- ``listen``: a notification sent from a second connection reaches a listening one within
  ``listen_timeout`` seconds (a transaction-mode pooler breaks this);
- ``connections``: free connection slots for at least two more worker processes
  (``connections_per_worker`` each, see docs/operations.md); ``fail`` below one.  Given the
  fleet's size (``workers``), the headroom is what the slots not reserved for superusers leave
  once the sessions that are not skiplock's and the fleet's at their most are counted:
  ``warn`` below one more worker process's worth, ``fail`` below none.

The pieces: :mod:`skiplock._doctor.findings` (:class:`Finding`, :class:`Thresholds`),
:mod:`skiplock._doctor.runner` (:class:`Doctor`, which runs the checks of
:mod:`skiplock._doctor.upkeep`, :mod:`skiplock._doctor.vacuum`, :mod:`skiplock._doctor.locks` and
:mod:`skiplock._doctor.server`)
and :mod:`skiplock._doctor.cli` (the command).  This module gathers what other code imports.
"""

from __future__ import annotations

from skiplock._doctor.cli import command
from skiplock._doctor.findings import COUNT_CAP, STATUS_ORDER, Finding, Status, Thresholds, worst
from skiplock._doctor.runner import Doctor
from skiplock._doctor.server import probe_listen
from skiplock._doctor.session import APPLICATION_NAME
from skiplock._doctor.vacuum import INDEX_ENTRY_BYTES

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
