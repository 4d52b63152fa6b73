"""The payloads of the schema's notification channel: a queue name wakes the workers of that
queue; :func:`cancel_payload` asks the worker running a held-lock job to cancel it (a leased
job's row takes a flag its worker's heartbeat reads, but a held-lock job's row is locked by the
transaction it runs in).  Written by the admin statements, read by the worker's listener
(:mod:`skiplock._runtime.listener`)."""

from __future__ import annotations

CANCEL_PREFIX = "!cancel:"  # "!" never starts a queue name, so no payload is both


def cancel_payload(job_id: int) -> str:
    """The notification that asks the worker running job ``job_id`` under a held lock to
    cancel it."""
    return f"{CANCEL_PREFIX}{int(job_id)}"
