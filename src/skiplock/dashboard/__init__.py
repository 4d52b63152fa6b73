"""A web dashboard for skiplock: queues, jobs and their errors, and the operator's actions
(retry, cancel, pause, resume).  An optional extra: ``pip install 'skiplock[dashboard]'``.

Run it with ``skiplock dashboard [APP]``, or mount :func:`create_dashboard` in your own ASGI
application (Starlette, FastAPI) behind your own authentication.  See ``docs/dashboard.md``.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "the skiplock dashboard needs its extra: pip install 'skiplock[dashboard]'"
    ) from exc

from skiplock.dashboard._server import create_dashboard

__all__ = ["create_dashboard"]
