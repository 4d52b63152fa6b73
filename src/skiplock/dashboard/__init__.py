"""A web dashboard for skiplock: queues, jobs and their errors, and the operator's actions
(retry, cancel, pause, resume).  An optional extra: ``pip install 'skiplock[dashboard]'``.

Run it with ``skiplock dashboard [APP]``, or mount :func:`create_dashboard` in your own ASGI
application (Starlette, FastAPI) behind your own authentication.  See ``docs/dashboard.md``.
"""

from __future__ import annotations

from importlib.util import find_spec

if find_spec("jinja2") is None or find_spec("starlette") is None:  # pragma: no cover
    raise ImportError("the skiplock dashboard needs its extra: pip install 'skiplock[dashboard]'")

from skiplock.dashboard._server import create_dashboard

__all__ = ["create_dashboard"]
