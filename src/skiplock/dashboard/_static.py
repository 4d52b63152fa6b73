"""The dashboard's one script (``static/live.js``: live updates of its tables), served from
the package; the pages run nothing else (see the Content-Security-Policy in ``_access``)."""

from __future__ import annotations

from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response


@cache
def _source() -> bytes:
    return resources.files("skiplock.dashboard").joinpath("static/live.js").read_bytes()


async def live_js(request: Request) -> Response:
    return Response(_source(), media_type="text/javascript")
