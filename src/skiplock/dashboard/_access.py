"""Who may use the dashboard, and which requests may change anything.

- **Access.** With a token, every request must carry it: once as ``?token=`` (the dashboard
  then sets an HttpOnly, SameSite=Strict cookie and redirects to the same page without the
  token in its address), then by that cookie, or as ``Authorization: Bearer <token>`` (scripts
  reading ``/api``).  The cookie's name holds a hash of the token (:func:`token_cookie`):
  cookies do not tell ports apart, and two dashboards on one host must not overwrite each
  other's.  Anything else gets 401.  ``token=None`` turns this off, for an
  application that mounts the dashboard behind its own authentication.
- **Changes.** Only POST requests change anything, and only from a form the dashboard
  rendered: its ``csrf`` field must equal the ``skiplock_csrf`` cookie (a value another site
  can neither read nor set), an ``Origin`` header, when the browser sends one, must name this
  host (or, behind a proxy, its ``X-Forwarded-Host``), and ``Sec-Fetch-Site``, when the
  browser sends it, must be ``same-origin``.  ``Origin: null`` (what a browser sends when told
  to hide origins) names no host, and a page of the same site (another port of the host, a
  sibling subdomain) can set the CSRF cookie to a value of its choosing and post that value:
  it is accepted only with ``Sec-Fetch-Site: same-origin`` (which browsers send over HTTPS
  and to localhost).
  :func:`checked_form` is the one way a POST handler reads its form.
- **Every response** is not cached, cannot be framed, and may run no script but the
  dashboard's own file (``/static/live.js``: no inline script, no other origin).  Its referrer
  policy is ``same-origin``: the dashboard's own form POSTs carry its real ``Origin`` (under
  ``no-referrer`` a browser sends ``Origin: null``), and no other site is sent a referrer.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from skiplock.errors import ConfigurationError

TOKEN_COOKIE = "skiplock_token"
CSRF_COOKIE = "skiplock_csrf"
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
        "script-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


MIN_TOKEN_LENGTH = 16


def new_token() -> str:
    """A token for one dashboard process (printed in the address it is opened with)."""
    return secrets.token_urlsafe(24)


def check_token(token: str) -> str:
    """``token``, or :class:`ConfigurationError` for one too weak or unusable: shorter than
    :data:`MIN_TOKEN_LENGTH`, or holding whitespace or control characters (a token of 16
    spaces would be accepted and guessed)."""
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigurationError(
            f"the dashboard token must be at least {MIN_TOKEN_LENGTH} characters, none of them "
            "spaces or control characters; leave it out to get a random one"
        )
    return token


def token_cookie(token: str) -> str:
    """The name of the cookie that holds ``token``: its own for each token, since a browser
    sends a host's cookies to all its ports, and two dashboards on one host (of two schemas)
    would otherwise each log the operator out of the other."""
    return f"{TOKEN_COOKIE}_{hashlib.sha256(token.encode()).hexdigest()[:16]}"


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _cookie_path(request: Request) -> str:
    return str(request.scope.get("root_path") or "") or "/"


class AccessMiddleware(BaseHTTPMiddleware):
    """Checks the token (if any), hands each page its CSRF value, adds the security headers."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        super().__init__(app)
        self.token = token
        self.token_cookie = token_cookie(token) if token is not None else TOKEN_COOKIE

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if self.token is not None:
            refused = self._refusal(request)
            if refused is not None:
                return _secured(refused)
        csrf = request.cookies.get(CSRF_COOKIE)
        fresh = csrf is None or len(csrf) < 32
        request.state.csrf = secrets.token_urlsafe(32) if fresh else csrf
        response = await call_next(request)
        if fresh:
            response.set_cookie(
                CSRF_COOKIE,
                request.state.csrf,
                httponly=True,
                samesite="strict",
                path=_cookie_path(request),
            )
        return _secured(response)

    def _refusal(self, request: Request) -> Response | None:
        """None when the request may go on; else the response that ends it."""
        assert self.token is not None
        given = request.query_params.get("token")
        if given is not None:
            if not _same(given, self.token):
                return _unauthorized(request)
            # Take the token out of the address (history, logs) and keep it in a cookie.
            query = urlencode(
                [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            )
            # A path of our own: "//host/..." (or "/\\host") in a Location is another site.
            target = "/" + request.url.path.lstrip("/\\") + (f"?{query}" if query else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(
                self.token_cookie,
                self.token,
                httponly=True,
                samesite="strict",
                path=_cookie_path(request),
            )
            return response
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else None
        if _same(request.cookies.get(self.token_cookie), self.token) or _same(bearer, self.token):
            return None
        return _unauthorized(request)


def _unauthorized(request: Request) -> Response:
    text = (
        "This skiplock dashboard needs its token: open the address `skiplock dashboard` "
        "printed (it ends in ?token=...), or send Authorization: Bearer <token>."
    )
    return refusal(request, 401, text)


def refusal(request: Request, status: int, text: str) -> Response:
    """An error answer: JSON for ``/api``, plain text for the pages."""
    if request.url.path.startswith(f"{request.scope.get('root_path', '')}/api"):
        return JSONResponse({"error": text}, status_code=status)
    return PlainTextResponse(f"{status}: {text}", status_code=status)


def _secured(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


async def checked_form(request: Request) -> FormData:
    """The form of a POST that may change something; 403 unless it came from our own page."""
    origin = request.headers.get("origin")
    # Behind a reverse proxy that rewrites Host, the browser's host is X-Forwarded-Host: a
    # header another site's form cannot set (a script of another site could only with a CORS
    # preflight, which the dashboard never answers).
    hosts = {
        request.headers.get("host"),
        request.headers.get("x-forwarded-host", "").split(",")[0].strip(),
    }
    if origin not in (None, "null") and urlsplit(origin).netloc not in hosts - {None, ""}:
        raise HTTPException(403, "cross-origin request refused")
    # Where the browser says the request comes from (no page can set this header): a POST
    # from a page of the same site but another origin may carry Origin: null and a CSRF
    # cookie that page set itself (cookie tossing).  The dashboard's own pages are
    # "same-origin" whatever referrer policy a proxy imposes on them; browsers send the
    # header to HTTPS and localhost only, and without it Origin: null proves nothing.
    site = request.headers.get("sec-fetch-site")
    if (site is not None or origin == "null") and site != "same-origin":
        raise HTTPException(403, "cross-origin request refused")
    form = await request.form()
    given: Any = form.get("csrf")
    expected = request.cookies.get(CSRF_COOKIE)
    if not isinstance(given, str) or expected is None or not _same(given, expected):
        raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
    return form
