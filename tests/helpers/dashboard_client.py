"""A real dashboard served by uvicorn on a free port in a thread, and a small browser for it
(urllib with a cookie jar): the tests speak HTTP to it as a browser or a script would."""

from __future__ import annotations

import http.cookiejar
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from typing import Any

import uvicorn

from helpers.polling import wait_for
from skiplock import App
from skiplock.dashboard import create_dashboard

TOKEN = "test-token-" + "x" * 16


@dataclass
class Page:
    status: int
    url: str
    text: str
    headers: Message

    def csrf(self) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.text)
        assert found, f"no form with a CSRF field on {self.url}"
        return found.group(1)

    def notice(self) -> str | None:
        found = re.search(r'class="notice">([^<]*)<', self.text)
        return found.group(1) if found else None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class Browser:
    """Cookies kept between requests, like a browser; redirects followed unless told not to."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        cookies = urllib.request.HTTPCookieProcessor(self.jar)
        self.opener = urllib.request.build_opener(cookies)
        self.no_redirect = urllib.request.build_opener(cookies, _NoRedirect)

    def request(
        self,
        path: str,
        *,
        data: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        follow: bool = True,
    ) -> Page:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(self.base + path, data=body, headers=headers or {})
        opener = self.opener if follow else self.no_redirect
        try:
            with opener.open(req, timeout=30) as response:
                return Page(response.status, response.url, response.read().decode(),
                            response.headers)  # fmt: skip
        except urllib.error.HTTPError as exc:
            return Page(exc.code, exc.url, exc.read().decode(), exc.headers)

    def get(self, path: str, **kwargs: object) -> Page:
        return self.request(path, **kwargs)  # type: ignore[arg-type]

    def post(self, path: str, data: dict[str, str], **kwargs: object) -> Page:
        return self.request(path, data=data, **kwargs)  # type: ignore[arg-type]

    def log_in(self) -> Page:
        return self.get(f"/?token={TOKEN}")


@contextmanager
def serving(app: App, *, token: str | None = TOKEN, read_only: bool = False) -> Iterator[str]:
    """The dashboard of ``app`` on 127.0.0.1 and a free port; yields its base address."""
    with serving_asgi(create_dashboard(app, token=token, read_only=read_only)) as base:
        yield base


@contextmanager
def serving_asgi(asgi: Any) -> Iterator[str]:
    """Any ASGI application on 127.0.0.1 and a free port; yields its base address."""
    server = uvicorn.Server(
        uvicorn.Config(asgi, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def started() -> bool:
        assert thread.is_alive(), "the dashboard did not start"
        return bool(server.started)

    wait_for(started, 20, "the dashboard to start", step=0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
