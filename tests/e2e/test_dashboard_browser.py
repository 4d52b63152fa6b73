"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` package) driven
by Playwright, against the dashboard served by uvicorn (``dashboard_client.serving``).

A browser does what an HTTP client in a test does not: it sets ``Origin`` and ``Referer`` from
the page's referrer policy, keeps SameSite cookies from other sites, follows the dashboard's
303s.  The tests log in with the token, click every action and check the tables; a page of
another origin (another port of the same host: same site, so the browser sends the dashboard's
cookies) posts to the dashboard and is refused.

Without chromium or the ``playwright`` package the tests are skipped, unless
``SKIPLOCK_REQUIRE_BROWSER`` is set (``.ci/run`` sets it), which makes their absence a failure.
No browser is ever downloaded: Playwright launches ``/usr/bin/chromium``.  With
``SKIPLOCK_SCREENSHOTS=DIR`` the jobs page is saved as ``DIR/dashboard-jobs.png``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from dashboard_client import TOKEN, serving, serving_asgi
from skiplock import App
from skiplock.dashboard import create_dashboard

pytestmark = pytest.mark.slow

REQUIRE_VAR = "SKIPLOCK_REQUIRE_BROWSER"
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE_VAR):
        pytest.fail(f"{REQUIRE_VAR} is set but {reason}")
    pytest.skip(reason)


def chromium_path() -> str:
    """Debian's chromium; skips the test (fails it, under CI) when there is none."""
    for path in (*CHROMIUM_PATHS, shutil.which("chromium")):
        if path and os.access(path, os.X_OK):
            return path
    _unavailable("chromium is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium, one per module (it takes a second or two to start)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install playwright)")
    executable = chromium_path()
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root, where Chromium's sandbox refuses to start.
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context()
    context.set_default_timeout(20_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def shop(app: App) -> App:
    @app.task(name="mail.send", queue="emails")
    def send(to: str) -> None: ...

    return app


def statuses(db: Any, app: App) -> dict[int, str]:
    return dict(db.execute(f'SELECT id, status FROM "{app.schema}".jobs').fetchall())


def fail(db: Any, app: App, job_id: int) -> None:
    db.execute(
        f'UPDATE "{app.schema}".jobs SET status = %s, attempts = max_attempts, '
        "last_error = 'ValueError: smtp said no', finished_at = now() WHERE id = %s",
        ("failed", job_id),
    )


def paused(app: App, queue: str) -> bool:
    rows = {row["queue"]: row for row in app.sync_client.queue_status()}
    return bool(rows[queue]["paused"])


def click(page: Any, button: str, lands_on: str) -> None:
    """Click a button of the page's forms; the answer must be the page ``lands_on`` (a glob)."""
    with page.expect_navigation() as navigation:
        page.get_by_role("button", name=button).click()
    response = navigation.value
    assert response.status == 200, (button, response.status, page.inner_text("body"))
    page.wait_for_url(lands_on)


def test_log_in_then_retry_cancel_pause_and_resume_by_clicking(
    shop: App, db: Any, page: Any
) -> None:
    failed = shop.enqueue("mail.send", {"to": "a@example.com"}).id
    pending = shop.enqueue("mail.send", {"to": "b@example.com"}).id
    fail(db, shop, failed)
    with serving(shop) as base:
        page.goto(f"{base}/?token={TOKEN}")
        assert page.url == f"{base}/"  # the token left the address for a cookie
        assert page.get_by_role("link", name="emails").count() >= 1

        page.goto(f"{base}/jobs/{failed}")
        click(page, "Retry", f"**/jobs/{failed}?notice=retried*")
        assert f"Job {failed} will run again." in page.inner_text(".notice")
        assert statuses(db, shop)[failed] == "pending"

        page.goto(f"{base}/jobs/{pending}")
        click(page, "Cancel", f"**/jobs/{pending}?notice=cancelled*")
        assert statuses(db, shop)[pending] == "cancelled"

        page.goto(f"{base}/")
        click(page, "Pause", "**/?notice=paused*")
        assert "Queue emails is paused" in page.inner_text(".notice")
        assert paused(shop, "emails")
        click(page, "Resume", "**/?notice=resumed*")
        assert not paused(shop, "emails")

        # Bulk retry of the failed jobs a filter selects.
        fail(db, shop, failed)
        page.goto(f"{base}/jobs?status=failed")
        screenshots = os.environ.get("SKIPLOCK_SCREENSHOTS")
        if screenshots:
            page.screenshot(path=str(Path(screenshots) / "dashboard-jobs.png"), full_page=True)
        click(page, "Retry every failed job", "**/jobs?notice=bulk-retried*")
        assert statuses(db, shop) == {failed: "pending", pending: "cancelled"}


def foreign_site(action: str, csrf: str, *, referrer_policy: str) -> Starlette:
    """Another origin's page with a form that posts to the dashboard."""

    async def form(request: Request) -> HTMLResponse:
        field = f'<input type="hidden" name="csrf" value="{csrf}">' if csrf else ""
        html = f'<form method="post" action="{action}">{field}<button>Go</button></form>'
        return HTMLResponse(html, headers={"Referrer-Policy": referrer_policy})

    return Starlette(routes=[Route("/", form)])


@pytest.mark.parametrize(
    ("referrer_policy", "csrf", "refusal"),
    [
        # Origin: the other page's, with the dashboard's own CSRF value (as if it had leaked):
        # the Origin check alone refuses it.
        ("strict-origin-when-cross-origin", "ours", "403: cross-origin request refused"),
        # Origin: null, without a CSRF value, with one that is not the cookie's, or with the
        # dashboard's own: the browser's Sec-Fetch-Site (same-site, not same-origin) refuses it.
        ("no-referrer", "", "403: cross-origin request refused"),
        ("no-referrer", "forged", "403: cross-origin request refused"),
        ("no-referrer", "ours", "403: cross-origin request refused"),
    ],
)
def test_a_post_from_another_origin_is_refused(
    shop: App, db: Any, page: Any, referrer_policy: str, csrf: str, refusal: str
) -> None:
    job = shop.enqueue("mail.send", {"to": "a@example.com"}).id
    with serving(shop) as base:
        page.goto(f"{base}/?token={TOKEN}")  # logged in: the browser holds both cookies
        page.goto(f"{base}/jobs/{job}")
        ours = page.locator('input[name="csrf"]').first.get_attribute("value")
        csrf = {"ours": ours, "forged": "x" * len(ours)}.get(csrf, csrf)
        evil = foreign_site(f"{base}/queues/emails/pause", csrf, referrer_policy=referrer_policy)
        with serving_asgi(evil) as other:
            assert other != base  # another port: another origin, the same site
            page.goto(f"{other}/")
            with page.expect_navigation():
                page.get_by_role("button", name="Go").click()
            assert page.inner_text("body").startswith(refusal), page.inner_text("body")
    assert not paused(shop, "emails")
    assert statuses(db, shop) == {job: "pending"}


def cookie_tossing_site(action: str, csrf: str) -> Starlette:
    """Another port of the dashboard's host (the same site) that sets the dashboard's CSRF
    cookie to a value it chose (cookies are per host, not per port, and a Set-Cookie header
    may replace an HttpOnly cookie), then posts that value with its origin hidden."""

    async def form(request: Request) -> HTMLResponse:
        html = (
            f'<form method="post" action="{action}">'
            f'<input type="hidden" name="csrf" value="{csrf}"><button>Go</button></form>'
        )
        response = HTMLResponse(html, headers={"Referrer-Policy": "no-referrer"})
        response.set_cookie("skiplock_csrf", csrf, path="/", httponly=True, samesite="strict")
        return response

    return Starlette(routes=[Route("/", form)])


def test_a_csrf_cookie_set_by_another_port_of_the_host_does_not_pass(
    shop: App, db: Any, page: Any
) -> None:
    """``Origin: null`` is left to the CSRF value, but the value and the cookie are both the
    other site's here: the browser's own word on where the form came from refuses it."""
    job = shop.enqueue("mail.send", {"to": "a@example.com"}).id
    chosen = "c" * 43
    with serving(shop) as base:
        page.goto(f"{base}/?token={TOKEN}")  # logged in: the browser holds both cookies
        page.goto(f"{base}/jobs/{job}")
        evil = cookie_tossing_site(f"{base}/queues/emails/pause", chosen)
        with serving_asgi(evil) as other:
            page.goto(f"{other}/")
            assert any(
                c["name"] == "skiplock_csrf" and c["value"] == chosen
                for c in page.context.cookies(base)
            )  # the dashboard's cookie was replaced
            with page.expect_navigation():
                page.get_by_role("button", name="Go").click()
            assert page.inner_text("body").startswith("403: "), page.inner_text("body")
    assert not paused(shop, "emails")


def test_own_forms_work_when_a_proxy_hides_the_origin(shop: App, db: Any, page: Any) -> None:
    """A proxy in front of the dashboard that sets ``Referrer-Policy: no-referrer`` makes the
    browser send ``Origin: null`` with the dashboard's own forms: still accepted (the browser
    says ``Sec-Fetch-Site: same-origin``)."""
    job = shop.enqueue("mail.send", {"to": "a@example.com"}).id
    dashboard = create_dashboard(shop, token=TOKEN)

    async def proxy(scope: Any, receive: Any, send: Any) -> None:
        async def rewritten(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message["headers"] if k != b"referrer-policy"]
                message = {**message, "headers": [*headers, (b"referrer-policy", b"no-referrer")]}
            await send(message)

        await dashboard(scope, receive, rewritten if scope["type"] == "http" else send)

    origins: list[str | None] = []
    page.on("request", lambda r: origins.append(r.headers.get("origin")))
    with serving_asgi(proxy) as base:
        page.goto(f"{base}/?token={TOKEN}")
        page.goto(f"{base}/jobs/{job}")
        click(page, "Cancel", f"**/jobs/{job}?notice=cancelled*")
    assert "null" in origins  # the browser did hide the origin
    assert statuses(db, shop) == {job: "cancelled"}
