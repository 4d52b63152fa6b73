"""Build the dashboard's ASGI application over an :class:`~skiplock.App`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import jinja2
import psycopg
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from skiplock._runtime.queue_settings import describe_settings
from skiplock.app import App
from skiplock.dashboard._access import AccessMiddleware, check_token, refusal
from skiplock.dashboard._views import Views
from skiplock.errors import DatabaseUnavailable, SchemaNotMigrated


def create_dashboard(app: App, *, token: str | None, read_only: bool = False) -> Starlette:
    """The dashboard of ``app``'s schema, as an ASGI application.

    ``token``: the secret every request must carry (see :mod:`skiplock.dashboard._access`);
    None only when the application you mount it in authenticates every request itself.
    ``read_only``: no actions (no POST routes at all).  Payload fields the app's tasks mark
    ``secret`` are shown as ``***``.  Its connection pool is the app's: closed with the
    dashboard's lifespan when it runs on its own, by ``app.close_async()`` when mounted.
    """
    if token is not None:
        check_token(token)
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("skiplock.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["queue_settings"] = describe_settings
    templates = Jinja2Templates(env=environment)
    views = Views(app, templates, read_only=read_only)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await app.close_async()

    async def unavailable(request: Request, exc: Exception) -> Response:
        return refusal(request, 503, str(exc))

    async def not_allowed(request: Request, exc: Exception) -> Response:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return refusal(request, 403, f"the database user may not do this ({first})")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return refusal(request, exc.status_code, exc.detail)

    return Starlette(
        routes=views.routes(),
        middleware=[Middleware(AccessMiddleware, token=token)],
        exception_handlers={
            HTTPException: http_error,
            DatabaseUnavailable: unavailable,
            SchemaNotMigrated: unavailable,
            psycopg.errors.InsufficientPrivilege: not_allowed,
        },
        lifespan=lifespan,
    )
