"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` package) driven
by Playwright, against the dashboard served by uvicorn (``dashboard_client.serving``).

A browser does what an HTTP client in a test does not: it sets ``Origin``, ``Referer`` and
``Sec-Fetch-Site`` from the page and its referrer policy, sends SameSite cookies from the
other origins of the same site (and a host's cookies to all its ports), follows the
dashboard's 303s, obeys its frame and content policies, lays the pages out.  The tests log in
with the token, open every page (the queues with their workers, the job list under each
filter, a job of every status, the JSON API), follow every link, click every button and check
the tables after each, mounted under a prefix too; a read-only dashboard shows no button and
refuses a form its own page posts; a page of another origin of the same site (another port of
the host, or a sibling subdomain of ``example.test``, which the browser resolves to
127.0.0.1) posts to every action, with or without a CSRF cookie it set itself, and is
refused, and cannot frame the dashboard; long values and a phone's screen stay readable.

Without chromium or the ``playwright`` package the tests are skipped, unless
``SKIPLOCK_REQUIRE_BROWSER`` is set (``.ci/run`` sets it), which makes their absence a failure.
No browser is ever downloaded: Playwright launches ``/usr/bin/chromium``.  With
``SKIPLOCK_SCREENSHOTS=DIR`` the pages docs/dashboard.md shows are saved as ``DIR/*.png``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from helpers.dashboard_client import TOKEN, serving, serving_asgi
from helpers.polling import wait_for
from skiplock import App, JobContext
from skiplock.dashboard import create_dashboard
from skiplock.dashboard._access import token_cookie
from skiplock.dashboard._views import PAGE_SIZE
from skiplock.retry import FixedDelay
from skiplock.testing import drain
from skiplock.worker import Worker

pytestmark = pytest.mark.slow

REQUIRE_VAR = "SKIPLOCK_REQUIRE_BROWSER"
SCREENSHOTS_VAR = "SKIPLOCK_SCREENSHOTS"
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
SITE = "example.test"  # resolved to 127.0.0.1 by the browser: ops.example.test, evil.example.test
T = TypeVar("T")


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
        # The example.test names are sites of their own on this host (sibling subdomains).
        args = ["--no-sandbox", f"--host-resolver-rules=MAP *.{SITE} 127.0.0.1"]
        browser = playwright.chromium.launch(executable_path=executable, args=args)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def context(chromium: Any) -> Iterator[Any]:
    """A fresh browser profile for one test: no cookies yet."""
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(20_000)
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def page(context: Any) -> Any:
    return context.new_page()


def screenshot(page: Any, name: str) -> None:
    """Save the page as ``$SKIPLOCK_SCREENSHOTS/name.png`` when that variable is set."""
    folder = os.environ.get(SCREENSHOTS_VAR)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a thread of its own: Playwright's sync API keeps an event loop on this one,
    where ``asyncio.run`` (which ``drain`` uses) must not run."""
    results: list[T] = []
    thread = threading.Thread(target=lambda: results.append(fn()))
    thread.start()
    thread.join(timeout=60)
    assert results, "the call in a thread did not finish"
    return results[0]


@contextmanager
def working(app: App, queues: list[str]) -> Iterator[Worker]:
    """A real worker of ``queues`` running in a thread until the block ends."""
    # A short lease: its heartbeat, which brings cancel requests, ticks every second.
    worker = Worker(
        app, queues=queues, concurrency=2, poll_interval=0.1, lease_seconds=3, shutdown_grace=2
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(worker.run()))
    thread.start()
    try:
        yield worker
    finally:
        loop.call_soon_threadsafe(worker.stop)
        thread.join(timeout=30)
        loop.close()
        assert not thread.is_alive(), "the worker did not stop"


# -- the application and its jobs -----------------------------------------------------------


@pytest.fixture
def shop(app: App) -> App:
    @app.task(name="mail.send", queue="emails")
    def send(to: str) -> None: ...

    @app.task(name="report.build", queue="reports", max_attempts=1, store_result=True)
    def build(week: int) -> dict[str, int]:
        if week > 52:
            raise ValueError(f"no data for week {week}")
        return {"rows": week * 10}

    @app.task(name="video.encode", queue="media")
    async def encode(seconds: float) -> None:
        await asyncio.sleep(seconds)

    return app


@dataclass
class Jobs:
    """One job of each status (``running`` only while its worker runs)."""

    pending: int
    scheduled: int
    waiting: int
    done: int
    failed: int
    cancelled: int


def seed(shop: App) -> Jobs:
    """Jobs of every finished and unfinished status, made the way an application makes them:
    enqueued, then run by a worker (done, or failed with a real traceback) or cancelled."""
    done = shop.enqueue("report.build", {"week": 7}).id
    failed = shop.enqueue("report.build", {"week": 53}).id
    in_thread(lambda: drain(shop, queues=["reports"]))
    scheduled = shop.enqueue("report.build", {"week": 8}, delay=3600).id
    waiting = shop.enqueue("mail.send", {"to": "after@example.com"}, depends_on=[scheduled]).id
    cancelled = shop.enqueue("mail.send", {"to": "never@example.com"}).id
    assert shop.sync_client.cancel_job(cancelled)
    pending = shop.enqueue("mail.send", {"to": "a@example.com"}).id
    return Jobs(pending, scheduled, waiting, done, failed, cancelled)


def statuses(db: Any, app: App) -> dict[int, str]:
    return dict(db.execute(f'SELECT id, status FROM "{app.schema}".jobs').fetchall())


def paused(app: App, queue: str) -> bool:
    rows = {row["queue"]: row for row in app.sync_client.queue_status()}
    return bool(rows[queue]["paused"])


# -- reading and using the pages --------------------------------------------------------------


def log_in(page: Any, base: str, path: str = "/") -> None:
    page.goto(f"{base}{path}{'&' if '?' in path else '?'}token={TOKEN}")
    assert "token" not in page.url


def table(page: Any, nth: int = 0) -> list[dict[str, str]]:
    """The rows of the page's ``nth`` table, as header -> cell text."""
    rows: list[list[str]] = (
        page.locator("table")
        .nth(nth)
        .evaluate("t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))")
    )
    header, *body = rows
    return [dict(zip(header, row, strict=True)) for row in body if len(row) == len(header)]


def listed_ids(page: Any) -> list[int]:
    return [int(row["id"]) for row in table(page)]


def query(page: Any) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def buttons(page: Any) -> list[str]:
    names: list[str] = page.locator("button").all_inner_texts()
    return [n.strip() for n in names]


def click(page: Any, button: str, lands_on: str) -> None:
    """Click a button of the page's forms; the answer must be the page ``lands_on`` (a glob)."""
    with page.expect_navigation() as navigation:
        page.get_by_role("button", name=button).click()
    response = navigation.value
    assert response.status == 200, (button, response.status, page.inner_text("body"))
    page.wait_for_url(lands_on)


def follow(page: Any, link: Any, lands_on: str) -> None:
    """Click a link (a locator); the answer must be the page ``lands_on`` (a glob), status 200."""
    with page.expect_navigation() as navigation:
        link.click()
    assert navigation.value.status == 200, (page.url, page.inner_text("body"))
    page.wait_for_url(lands_on)


def open_json(page: Any, url: str, status: int = 200) -> Any:
    """Open a JSON address in the browser, as an operator would; its parsed body."""
    response = page.goto(url)
    assert response.status == status, (url, response.status)
    assert response.headers["content-type"].startswith("application/json")
    return json.loads(page.inner_text("body"))


def notice(page: Any) -> str:
    text: str = page.inner_text(".notice")
    return text


# -- the token ----------------------------------------------------------------------------


def test_the_token_login_refuses_a_wrong_token_and_keeps_the_right_one_in_a_strict_cookie(
    shop: App, context: Any, page: Any
) -> None:
    shop.enqueue("mail.send", {"to": "a@example.com"})
    with serving(shop) as base:
        for address in (f"{base}/", f"{base}/jobs?token=wrong-{TOKEN}", f"{base}/?token="):
            response = page.goto(address)
            assert response.status == 401, address
            assert "needs its token" in page.inner_text("body")
            assert "Pause" not in page.content()
        assert {c["name"] for c in context.cookies()} <= {"skiplock_csrf"}
        assert open_json(page, f"{base}/api/queues", 401)["error"].startswith("This skiplock")

        # The right token, given on a deep page: the same page, without the token, and cookies.
        response = page.goto(f"{base}/jobs?status=pending&token={TOKEN}")
        assert response.status == 200
        assert page.url == f"{base}/jobs?status=pending"
        assert page.request.get(page.url).ok  # the cookie alone lets the browser in
        cookies = {c["name"]: c for c in context.cookies()}
        assert set(cookies) == {token_cookie(TOKEN), "skiplock_csrf"}
        for cookie in cookies.values():
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
            assert cookie["path"] == "/" and cookie["domain"] == "127.0.0.1"
        assert cookies[token_cookie(TOKEN)]["value"] == TOKEN
        assert page.evaluate("document.cookie") == ""  # no script of the page can read them
        # The token is in no link or form of the pages (the header's links included).
        for path in ("/", "/jobs", "/jobs?status=pending"):
            page.goto(base + path)
            assert TOKEN not in page.content()
            assert [a for a in page.locator("a").evaluate_all("as => as.map(a => a.href)")
                    if "token" in a] == []  # fmt: skip
        # A wrong token in the address is refused even with the right cookie.
        assert page.goto(f"{base}/?token=x{TOKEN}").status == 401
        # Forgetting the cookie is logging out: the dashboard asks for the token again.
        context.clear_cookies()
        assert page.goto(f"{base}/jobs").status == 401


def test_two_dashboards_on_one_host_keep_their_logins_apart(
    shop: App, pg_dsn: str, db: Any, context: Any, page: Any
) -> None:
    """Cookies do not tell ports apart: two dashboards on one host (of two schemas, say) each
    keep their own login, and neither is logged out by logging in to the other."""
    job = shop.enqueue("mail.send", {"to": "a@example.com"}).id
    other_token = "other-token-" + "y" * 16
    same = App(pg_dsn, shop.schema)
    try:
        with (
            serving(shop) as first,
            serving_asgi(create_dashboard(same, token=other_token)) as second,
        ):
            log_in(page, first)
            page.goto(f"{second}/?token={other_token}")
            assert page.url == f"{second}/"
            for base in (first, second, first):
                response = page.goto(f"{base}/jobs")
                assert response.status == 200, (base, page.inner_text("body"))
            # The buttons of both work.
            page.goto(f"{first}/jobs/{job}")
            click(page, "Cancel", f"{first}/jobs/{job}?notice=cancelled*")
            page.goto(f"{second}/jobs/{job}")
            click(page, "Retry", f"{second}/jobs/{job}?notice=retried*")
    finally:
        same.close()
    assert statuses(db, shop) == {job: "pending"}


# -- every page, every link ---------------------------------------------------------------


def test_every_page_shows_the_tables_and_every_link_leads_where_it_says(
    shop: App, db: Any, page: Any
) -> None:
    jobs = seed(shop)
    shop.sync_client.set_concurrency_limit("reports", 2)
    with serving(shop) as base, working(shop, ["media"]):
        # Long enough to run through the whole test on a loaded machine (cancelled at its end).
        running = shop.enqueue("video.encode", {"seconds": 600}).id
        wait_for(lambda: statuses(db, shop)[running] == "running", 20, "the video job runs")
        wait_for(
            lambda: [w["running"] for w in shop.sync_client.list_workers()] == [1],
            20,
            "the worker reports itself and its running job",
        )
        log_in(page, base)

        # The queues page: one row per queue with its counts, and the worker below.
        assert page.title() == f"Queues · skiplock ({shop.schema})"
        queues = {row["queue"]: row for row in table(page, 0)}
        assert set(queues) == {"emails", "reports", "media"}
        counts = ("pending", "scheduled", "waiting", "running", "failed", "done", "cancelled")
        assert [queues["emails"][c] for c in counts] == ["1", "0", "1", "0", "0", "0", "1"]
        assert [queues["reports"][c] for c in counts] == ["0", "1", "0", "0", "1", "1", "0"]
        assert [queues["media"][c] for c in counts] == ["0", "0", "0", "1", "0", "0", "0"]
        assert queues["media"]["workers"] == "1" and queues["emails"]["workers"] == "0"
        assert queues["emails"]["oldest due"].endswith("s")
        assert queues["reports"]["oldest due"] == "-"
        assert queues["reports"]["settings"] == "at most 2 running"
        assert {row[""] for row in queues.values()} == {"Pause Limits…"}
        (worker,) = table(page, 1)
        assert worker["queues"] == "media" and worker["running"] == "1"
        assert worker["last seen"].endswith("s ago") and "(silent)" not in worker["last seen"]
        screenshot(page, "dashboard-queues")

        # Its links: each queue, and its waiting, running and failed counts, to a filtered list.
        follow(page, page.get_by_role("link", name="emails", exact=True), "**/jobs?queue=emails")
        assert set(listed_ids(page)) == {jobs.pending, jobs.waiting, jobs.cancelled}
        page.go_back()
        for queue, status, expected in (
            ("reports", "failed", jobs.failed),
            ("media", "running", running),
            ("emails", "waiting", jobs.waiting),
        ):
            link = f"/jobs?queue={queue}&status={status}"
            follow(page, page.locator(f'a[href="{link}"]'), f"**{link}")
            assert listed_ids(page) == [expected]
            page.go_back()

        # Auto-refresh: a meta refresh, and a link to stop it.
        page.goto(f"{base}/")
        follow(page, page.get_by_role("link", name="Refresh every 5s"), "**/?refresh=5")
        assert page.locator('meta[http-equiv="refresh"]').get_attribute("content") == "5"
        assert "Refreshing every 5s" in page.inner_text("main")
        follow(page, page.get_by_role("link", name="stop"), f"{base}/")
        assert page.locator('meta[http-equiv="refresh"]').count() == 0
        page.goto(f"{base}/?refresh=1")  # (at least every 2s)
        with page.expect_navigation(url=f"{base}/?refresh=1", timeout=10_000):
            pass  # the browser reloads the page by itself, its scripts being forbidden
        assert "Refreshing every 2s" in page.inner_text("main")

        # The header's links.
        everything = sorted(statuses(db, shop), reverse=True)
        for name, lands_on, expected in (
            ("Jobs", "**/jobs", everything),
            ("Failed", "**/jobs?status=failed", [jobs.failed]),
            ("Running", "**/jobs?status=running", [running]),
            ("Queues", f"{base}/", None),
        ):
            follow(page, page.locator("header").get_by_role("link", name=name), lands_on)
            if expected is not None:
                assert listed_ids(page) == expected, name
        assert page.locator("h1").inner_text() == "Queues"

        # The job list: every status of the filter form, then queue and task together.
        page.goto(f"{base}/jobs")
        rows = {int(row["id"]): row for row in table(page)}
        assert rows[jobs.failed]["last error"] == "ValueError: no data for week 53"
        assert rows[jobs.done]["status"] == "done" and rows[jobs.done]["attempts"] == "1/1"
        assert f"{len(everything)} shown" in page.inner_text("main")
        screenshot(page, "dashboard-jobs")
        by_status = {**vars(jobs), "running": running}
        for status, expected_id in by_status.items():
            page.select_option('select[name="status"]', status)
            click(page, "Show", f"**/jobs?*status={status}*")
            assert listed_ids(page) == [expected_id], status
            assert {row["status"] for row in table(page)} == {status}
            assert page.locator('select[name="status"]').input_value() == status
        page.select_option('select[name="status"]', "")
        page.fill('input[name="queue"]', "reports")
        page.fill('input[name="task"]', "report.build")
        click(page, "Show", "**/jobs?queue=reports&status=&task=report.build&key=&value=")
        assert listed_ids(page) == sorted([jobs.done, jobs.failed, jobs.scheduled], reverse=True)
        page.fill('input[name="queue"]', "nowhere")
        click(page, "Show", "**/jobs?queue=nowhere*")
        assert page.locator("td.muted").inner_text() == "No job matches."
        page.fill('input[name="queue"]', "bad queue!")
        with page.expect_navigation() as navigation:
            page.get_by_role("button", name="Show").click()
        assert navigation.value.status == 400
        assert page.inner_text("body").startswith("400: ")

        # Each job's page, reached from its row in the list.
        page.goto(f"{base}/jobs")
        follow(page, page.get_by_role("link", name=str(jobs.failed), exact=True),
               f"**/jobs/{jobs.failed}")  # fmt: skip
        assert page.locator("h1").inner_text() == f"Job {jobs.failed} failed"
        error = page.locator("h2:has-text('Last error') + pre").inner_text()
        headline, traceback = error.split("\n\n", 1)
        assert headline == "ValueError: no data for week 53"
        assert traceback.startswith("Traceback (most recent call last):")
        assert 'raise ValueError(f"no data for week {week}")' in traceback
        assert buttons(page) == ["Retry"]
        screenshot(page, "dashboard-job-failed")
        follow(page, page.locator("dd a").first, "**/jobs?queue=reports")
        assert jobs.failed in listed_ids(page)

        expected_buttons = {"failed": ["Retry"], "cancelled": ["Retry"], "done": []}
        for status, job_id in by_status.items():
            page.goto(f"{base}/jobs/{job_id}")
            assert page.locator("h1 .status").inner_text() == status
            assert buttons(page) == expected_buttons.get(status, ["Cancel"]), status
            facts = dict(zip(page.locator("dt").all_inner_texts(),
                             page.locator("dd").all_inner_texts(), strict=True))  # fmt: skip
            assert facts["task"] == shop.sync_client.get_job(job_id).task  # type: ignore[union-attr]
        page.goto(f"{base}/jobs/{jobs.done}")
        assert json.loads(page.locator("h2:has-text('Result') + pre").inner_text()) == {"rows": 70}
        page.goto(f"{base}/jobs/{running}")
        claimed = page.locator("dt:has-text('claimed by') + dd").inner_text()
        assert claimed.startswith(worker["worker"]) and " until " in claimed
        page.goto(f"{base}/jobs/{jobs.waiting}")
        waits = page.locator("dt:has-text('waits for') + dd")
        assert waits.inner_text() == f"{jobs.scheduled} (scheduled)"
        follow(page, waits.get_by_role("link"), f"**/jobs/{jobs.scheduled}")
        payload = json.loads(page.locator("h2:has-text('Payload') + pre").inner_text())
        assert payload == {"week": 8}
        assert page.goto(f"{base}/jobs/{max(everything) + 1000}").status == 404
        assert page.inner_text("body") == f"404: no job {max(everything) + 1000}"

        # The JSON API, opened in the browser.
        api = {q["queue"]: q for q in open_json(page, f"{base}/api/queues")}
        assert api["reports"]["failed"] == 1 and api["media"]["running"] == 1
        (listed,) = open_json(page, f"{base}/api/workers")
        assert listed["id"] == worker["worker"] and listed["queues"] == ["media"]
        failed_only = open_json(page, f"{base}/api/jobs?status=failed")
        assert [j["id"] for j in failed_only["jobs"]] == [jobs.failed]
        assert failed_only["next_before"] is None
        one = open_json(page, f"{base}/api/jobs/{jobs.failed}")
        assert one["status"] == "failed" and "no data for week 53" in one["last_error"]
        assert open_json(page, f"{base}/api/jobs/{jobs.waiting}")["waits_for"] == {
            str(jobs.scheduled): "scheduled"
        }
        assert open_json(page, f"{base}/api/jobs/{max(everything) + 1000}", 404) == {
            "error": "no such job"
        }
        assert "error" in open_json(page, f"{base}/api/jobs?status=nonsense", 400)
        shop.sync_client.cancel_or_request(running)  # let the worker stop at once


def test_the_job_list_pages_by_older_jobs_keeping_its_filter(shop: App, db: Any, page: Any) -> None:
    extra = 7
    mails = [e.id for e in shop.enqueue_many("mail.send", [
        {"to": f"u{i}@example.com"} for i in range(PAGE_SIZE + extra)])]  # fmt: skip
    report = shop.enqueue("report.build", {"week": 1}).id
    with serving(shop) as base:
        log_in(page, base, "/jobs")
        first = listed_ids(page)
        assert first == sorted([*mails, report], reverse=True)[:PAGE_SIZE]
        assert f"{PAGE_SIZE} shown" in page.inner_text("main")
        follow(page, page.get_by_role("link", name="Older jobs"), f"**/jobs?before={first[-1]}")
        second = listed_ids(page)
        assert second == sorted(mails)[: extra + 1][::-1]
        assert page.get_by_role("link", name="Older jobs").count() == 0

        # Paging a filtered list keeps its filter in the "Older jobs" link.
        page.goto(f"{base}/jobs?queue=emails&task=mail.send")
        first = listed_ids(page)
        follow(page, page.get_by_role("link", name="Older jobs"), "**/jobs?*before=*")
        assert query(page) == {
            "queue": ["emails"], "task": ["mail.send"], "before": [str(first[-1])]
        }  # fmt: skip
        assert sorted(first + listed_ids(page)) == sorted(mails)


# -- every action -------------------------------------------------------------------------


def test_every_button_changes_what_it_says_and_the_page_says_so(
    shop: App, db: Any, page: Any
) -> None:
    jobs = seed(shop)
    other_failed = shop.enqueue("report.build", {"week": 60}).id
    in_thread(lambda: drain(shop, queues=["reports"]))
    with serving(shop) as base:
        log_in(page, base)

        # Retry a failed job; a second tab still showing it retries it no more.
        stale = page.context.new_page()
        stale.goto(f"{base}/jobs/{jobs.failed}")
        page.goto(f"{base}/jobs/{jobs.failed}")
        click(page, "Retry", f"**/jobs/{jobs.failed}?notice=retried*")
        assert notice(page) == f"Job {jobs.failed} will run again."
        assert page.locator("h1 .status").inner_text() == "pending"
        assert buttons(page) == ["Cancel"]
        assert statuses(db, shop)[jobs.failed] == "pending"
        click(stale, "Retry", f"**/jobs/{jobs.failed}?notice=not-retried*")
        assert notice(stale) == f"Job {jobs.failed} is not failed or cancelled: nothing changed."
        stale.close()

        # Retry a cancelled job.
        page.goto(f"{base}/jobs/{jobs.cancelled}")
        click(page, "Retry", f"**/jobs/{jobs.cancelled}?notice=retried*")
        assert statuses(db, shop)[jobs.cancelled] == "pending"

        # Cancel a pending, a scheduled and a waiting job.
        for job_id in (jobs.pending, jobs.waiting, jobs.scheduled):
            page.goto(f"{base}/jobs/{job_id}")
            click(page, "Cancel", f"**/jobs/{job_id}?notice=cancelled*")
            assert notice(page) == f"Job {job_id} was cancelled."
            assert page.locator("h1 .status").inner_text() == "cancelled"
            assert statuses(db, shop)[job_id] == "cancelled"

        # Cancel a running job: its worker is asked, and cancels it.
        with working(shop, ["media"]):
            running = shop.enqueue("video.encode", {"seconds": 60}).id
            wait_for(lambda: statuses(db, shop)[running] == "running", 20, "the video job runs")
            page.goto(f"{base}/jobs/{running}")
            click(page, "Cancel", f"**/jobs/{running}?notice=requested*")
            assert notice(page) == f"The worker running job {running} was asked to cancel it."
            wait_for(lambda: statuses(db, shop)[running] != "running", 20, "the worker cancels")
        page.reload()
        assert page.locator("h1 .status").inner_text() == "cancelled"
        assert statuses(db, shop)[running] == "cancelled"

        # A retry that would make a second unfinished job with an idempotency key.
        keyed = shop.enqueue("mail.send", {"to": "k@example.com"}, idempotency_key="k-1").id
        assert shop.sync_client.cancel_job(keyed)
        holder = shop.enqueue("mail.send", {"to": "k@example.com"}, idempotency_key="k-1").id
        page.goto(f"{base}/jobs/{keyed}")
        click(page, "Retry", f"**/jobs/{keyed}?notice=conflict*")
        assert notice(page) == (
            f"Job {keyed} was not retried: unfinished job {holder} holds its idempotency key."
        )
        assert statuses(db, shop)[keyed] == "cancelled"

        # Pause and resume a queue from the queues page.
        page.goto(f"{base}/")
        row = page.locator("tr", has=page.get_by_role("link", name="emails", exact=True))
        with page.expect_navigation():
            row.get_by_role("button", name="Pause").click()
        page.wait_for_url("**/?notice=paused&queue=emails")
        assert (
            notice(page) == "Queue emails is paused: no worker claims its jobs until it is resumed."
        )
        assert paused(shop, "emails") and not paused(shop, "reports")
        emails = {r["queue"]: r for r in table(page)}["emails"]
        assert "paused" in emails["settings"] and emails[""] == "Resume Limits…"
        click(page, "Resume", "**/?notice=resumed&queue=emails")
        assert notice(page) == "Queue emails runs again."
        assert not paused(shop, "emails")

        # Bulk retry of the failed jobs of the filtered list, one queue's only.
        before = statuses(db, shop)
        failed_now = sorted(i for i, s in before.items() if s == "failed")
        assert other_failed in failed_now
        page.goto(f"{base}/jobs?status=failed&task=report.build")
        click(page, "Retry every failed job of task report.build", "**/jobs?notice=bulk-retried*")
        retried = len([i for i in failed_now if before[i] == "failed"])
        assert notice(page) == (
            f"{retried} job{'' if retried == 1 else 's'} will run again; "
            "0 skipped (an unfinished job holds their idempotency key, or they break a bound of "
            "the jobs table)."
        )
        assert query(page)["status"] == ["failed"] and query(page)["task"] == ["report.build"]
        assert page.locator("td.muted").inner_text() == "No job matches."
        after = statuses(db, shop)
        assert {i: s for i, s in after.items() if i not in failed_now} == {
            i: s for i, s in before.items() if i not in failed_now
        }
        assert {after[i] for i in failed_now} == {"pending"}
        # No failed job: no bulk button.
        assert "Retry every failed job" not in " ".join(buttons(page))


def test_mounted_under_a_prefix_every_link_and_button_stays_under_it(
    shop: App, db: Any, context: Any, page: Any
) -> None:
    from starlette.routing import Mount

    jobs = seed(shop)
    dashboard = create_dashboard(shop, token=TOKEN)
    with serving_asgi(Starlette(routes=[Mount("/ops/jobs", dashboard)])) as host:
        base = f"{host}/ops/jobs"
        page.goto(f"{base}/jobs?status=failed&token={TOKEN}")
        assert page.url == f"{base}/jobs?status=failed"
        assert {c["name"]: c["path"] for c in context.cookies()} == {
            token_cookie(TOKEN): "/ops/jobs", "skiplock_csrf": "/ops/jobs"
        }  # fmt: skip
        assert listed_ids(page) == [jobs.failed]
        hrefs = page.locator("a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
        assert all(h.startswith("/ops/jobs/") for h in hrefs), hrefs
        for name, lands_on in (("Queues", f"{base}/"), ("Jobs", f"{base}/jobs")):
            follow(page, page.locator("header").get_by_role("link", name=name), lands_on)
        follow(page, page.get_by_role("link", name=str(jobs.failed)), f"{base}/jobs/{jobs.failed}")
        click(page, "Retry", f"{base}/jobs/{jobs.failed}?notice=retried*")
        click(page, "Cancel", f"{base}/jobs/{jobs.failed}?notice=cancelled*")
        page.goto(f"{base}/")
        row = page.locator("tr", has=page.get_by_role("link", name="emails", exact=True))
        with page.expect_navigation():
            row.get_by_role("button", name="Pause").click()
        page.wait_for_url(f"{base}/?notice=paused&queue=emails")
        assert paused(shop, "emails")
        click(page, "Resume", f"{base}/?notice=resumed&queue=emails")
        page.goto(f"{base}/jobs?status=cancelled")
        assert jobs.failed in listed_ids(page)
    assert statuses(db, shop)[jobs.failed] == "cancelled" and not paused(shop, "emails")


def test_on_a_phone_the_pages_fit_the_screen_and_the_tables_scroll_in_their_box(
    shop: App, chromium: Any
) -> None:
    jobs = seed(shop)
    context = chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        page = context.new_page()
        with serving(shop) as base:
            log_in(page, base)
            for path in ("/", "/jobs", f"/jobs/{jobs.failed}"):
                page.goto(base + path)
                wide = page.evaluate("document.documentElement.scrollWidth")
                assert wide <= 390, (path, wide)
                header = page.locator("header").evaluate("h => [h.scrollWidth, h.clientWidth]")
                assert header[0] <= header[1], (path, header)
                # Cells are not squeezed to a few letters a line: every row is one line high.
                lines = page.locator("td").evaluate_all(
                    """tds => tds.map(td => {
                        const css = getComputedStyle(td);
                        const padding = parseFloat(css.paddingTop) + parseFloat(css.paddingBottom);
                        return Math.round((td.clientHeight - padding) / parseFloat(css.lineHeight));
                    })"""
                )
                assert set(lines) == {1}, (path, lines)  # (a job's page: its attempts)
            page.goto(f"{base}/jobs")
            box = page.locator(".table").evaluate("b => [b.scrollWidth, b.clientWidth]")
            assert box[0] > box[1]  # the table scrolls in its box, not the page
            page.locator(".table").evaluate("b => b.scrollBy(1000, 0)")
            assert page.locator(".table").evaluate("b => b.scrollLeft") > 0
    finally:
        context.close()


# -- read-only ----------------------------------------------------------------------------


def test_a_read_only_dashboard_shows_no_button_and_refuses_a_form_posted_from_its_page(
    shop: App, db: Any, context: Any, page: Any
) -> None:
    jobs = seed(shop)
    before = statuses(db, shop)
    with serving(shop, read_only=True) as base:
        log_in(page, base)
        assert "read-only" in page.inner_text("header")
        assert buttons(page) == []
        assert "" not in table(page)[0]  # no action column
        screenshot(page, "dashboard-read-only")
        page.goto(f"{base}/jobs?status=failed")
        assert listed_ids(page) == [jobs.failed]
        assert buttons(page) == ["Show", "Open"]  # the filter and the job id only
        assert page.get_by_role("link", name="Retry every failed job of this filter…").count() == 0
        for job_id in (jobs.failed, jobs.cancelled, jobs.pending):
            page.goto(f"{base}/jobs/{job_id}")
            assert buttons(page) == [] and page.locator("form").count() == 0

        # A form posted from the dashboard's own page, with the right CSRF value (as a page
        # of a writable dashboard would carry): refused, whichever action it asks for.
        csrf = {c["name"]: c["value"] for c in context.cookies()}["skiplock_csrf"]
        for action in (
            f"/jobs/{jobs.failed}/retry",
            f"/jobs/{jobs.pending}/cancel",
            "/jobs/retry-failed",
            "/jobs/bulk/retry",
            "/jobs/bulk/cancel",
            "/jobs/bulk/delete",
            "/queues/emails/pause",
            "/queues/emails/limit",
            "/queues/emails/rate",
        ):
            page.goto(f"{base}/jobs/{jobs.failed}")
            page.evaluate(
                """([action, csrf]) => {
                    const form = document.createElement("form");
                    form.method = "post";
                    form.action = action;
                    const field = document.createElement("input");
                    field.name = "csrf";
                    field.value = csrf;
                    form.append(field);
                    document.body.append(form);
                    form.submit();
                }""",
                [action, csrf],
            )
            page.wait_for_url(f"{base}{action}")
            assert page.inner_text("body") == "403: this dashboard is read-only: it changes nothing"
    assert statuses(db, shop) == before
    assert not paused(shop, "emails")


# -- other origins --------------------------------------------------------------------------


def foreign_site(
    actions: list[str], csrf: str, *, referrer_policy: str, cookie_domain: str | None = None
) -> Starlette:
    """Another origin's page with one form for each action, posting to the dashboard, and a
    page that frames the dashboard.  With ``cookie_domain``, the page also sets the dashboard's
    CSRF cookie to ``csrf`` (for that domain; "": its own host)."""

    async def forms(request: Request) -> HTMLResponse:
        field = f'<input type="hidden" name="csrf" value="{csrf}">' if csrf else ""
        html = "".join(
            f'<form method="post" action="{action}">{field}'
            '<input type="hidden" name="queue" value="">'
            f"<button>Go {n}</button></form>"
            for n, action in enumerate(actions)
        )
        response = HTMLResponse(html, headers={"Referrer-Policy": referrer_policy})
        if cookie_domain is not None:
            response.set_cookie("skiplock_csrf", csrf, domain=cookie_domain or None)
        return response

    async def frame(request: Request) -> HTMLResponse:
        target = request.query_params["src"]
        return HTMLResponse(f'<iframe src="{target}" width="800" height="600"></iframe>')

    return Starlette(routes=[Route("/", forms), Route("/frame", frame)])


@pytest.mark.parametrize(
    ("referrer_policy", "csrf", "refusal"),
    [
        # Origin: the other page's, with the dashboard's own CSRF value (as if it had leaked):
        # the Origin check alone refuses it.
        ("strict-origin-when-cross-origin", "ours", "403: cross-origin request refused"),
        ("unsafe-url", "ours", "403: cross-origin request refused"),
        # Origin: null, with the leaked CSRF value, a forged one or none: the browser's
        # Sec-Fetch-Site (same-site, not same-origin) refuses it.
        ("no-referrer", "ours", "403: cross-origin request refused"),
        ("no-referrer", "", "403: cross-origin request refused"),
        ("no-referrer", "forged", "403: cross-origin request refused"),
    ],
)
def test_a_post_from_another_origin_is_refused_for_every_action(
    shop: App, db: Any, page: Any, referrer_policy: str, csrf: str, refusal: str
) -> None:
    jobs = seed(shop)
    before = statuses(db, shop)
    with serving(shop) as base:
        log_in(page, base)  # logged in: the browser holds both cookies
        page.goto(f"{base}/jobs/{jobs.pending}")
        ours = page.locator('input[name="csrf"]').first.get_attribute("value")
        csrf = {"ours": ours, "forged": "x" * len(ours)}.get(csrf, csrf)
        actions = [
            f"{base}/jobs/{jobs.failed}/retry",
            f"{base}/jobs/{jobs.pending}/cancel",
            f"{base}/jobs/retry-failed",
            f"{base}/jobs/bulk/retry",
            f"{base}/jobs/bulk/cancel",
            f"{base}/jobs/bulk/delete",
            f"{base}/queues/emails/pause",
            f"{base}/queues/emails/limit",
        ]
        evil = foreign_site(actions, csrf, referrer_policy=referrer_policy)
        with serving_asgi(evil) as other:
            assert other != base  # another port: another origin, the same site
            for n in range(len(actions)):
                page.goto(f"{other}/")
                with page.expect_navigation() as navigation:
                    page.get_by_role("button", name=f"Go {n}").click()
                assert navigation.value.status == 403
                assert page.inner_text("body").startswith(refusal), page.inner_text("body")
    assert not paused(shop, "emails")
    assert statuses(db, shop) == before


@pytest.mark.parametrize(
    ("dashboard_host", "other_host", "cookie_domain"),
    [
        ("127.0.0.1", "127.0.0.1", ""),  # another port of the host: cookies know no ports
        (f"ops.{SITE}", f"evil.{SITE}", SITE),  # a sibling subdomain, for the whole site
    ],
)
def test_a_csrf_cookie_set_by_another_origin_of_the_site_opens_no_action(
    shop: App, db: Any, context: Any, page: Any, dashboard_host: str, other_host: str,
    cookie_domain: str,
) -> None:  # fmt: skip
    """Cookie tossing: a page of the same site (which the browser sends the dashboard's
    SameSite cookies from) sets the CSRF cookie to a value of its choosing, then posts that
    value from a page that hides its origin (``Origin: null``)."""
    jobs = seed(shop)
    before = statuses(db, shop)
    chosen = "c" * 43
    with serving(shop) as served:
        base = served.replace("127.0.0.1", dashboard_host)
        log_in(page, base)
        page.goto(f"{base}/jobs/{jobs.pending}")
        actions = [
            f"{base}/jobs/{jobs.failed}/retry",
            f"{base}/jobs/{jobs.pending}/cancel",
            f"{base}/jobs/retry-failed",
            f"{base}/jobs/bulk/cancel",
            f"{base}/jobs/bulk/delete",
            f"{base}/queues/emails/pause",
            f"{base}/queues/emails/rate",
        ]
        evil = foreign_site(
            actions, chosen, referrer_policy="no-referrer", cookie_domain=cookie_domain
        )
        with serving_asgi(evil) as other:
            other = other.replace("127.0.0.1", other_host)
            for n in range(len(actions)):
                page.goto(f"{other}/")
                sent = [c["value"] for c in context.cookies(base) if c["name"] == "skiplock_csrf"]
                assert chosen in sent  # the browser would send the chosen value
                with page.expect_navigation() as navigation:
                    page.get_by_role("button", name=f"Go {n}").click()
                assert navigation.value.status == 403, (actions[n], page.inner_text("body"))
                assert page.inner_text("body") == "403: cross-origin request refused"
    assert not paused(shop, "emails")
    assert statuses(db, shop) == before


def forcing_no_referrer(asgi: Any) -> Any:
    """``asgi`` behind a proxy that sets ``Referrer-Policy: no-referrer`` on every response."""

    async def proxied(scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message["headers"] if k != b"referrer-policy"]
                message = {**message, "headers": [*headers, (b"referrer-policy", b"no-referrer")]}
            await send(message)

        await asgi(scope, receive, sending)

    return proxied


def test_the_buttons_work_behind_a_proxy_that_hides_the_origin(
    shop: App, db: Any, page: Any
) -> None:
    """Under ``no-referrer`` the browser sends ``Origin: null`` on the dashboard's own form
    POSTs (every button answered 403 when the dashboard itself sent that policy); it also
    sends ``Sec-Fetch-Site: same-origin``, and the CSRF value decides."""
    jobs = seed(shop)
    with serving_asgi(forcing_no_referrer(create_dashboard(shop, token=TOKEN))) as base:
        log_in(page, base)
        page.goto(f"{base}/jobs/{jobs.failed}")
        with page.expect_request(f"{base}/jobs/{jobs.failed}/retry") as posted:
            click(page, "Retry", f"**/jobs/{jobs.failed}?notice=retried*")
        headers = posted.value.all_headers()
        assert (headers["origin"], headers["sec-fetch-site"]) == ("null", "same-origin")
        page.goto(f"{base}/")
        row = page.locator("tr", has=page.get_by_role("link", name="emails", exact=True))
        with page.expect_navigation():
            row.get_by_role("button", name="Pause").click()
        assert notice(page).startswith("Queue emails is paused")
    assert statuses(db, shop)[jobs.failed] == "pending" and paused(shop, "emails")


def test_another_origin_cannot_frame_the_dashboard(shop: App, page: Any) -> None:
    with serving(shop) as base:
        log_in(page, base)
        evil = foreign_site([], "", referrer_policy="no-referrer")
        with serving_asgi(evil) as other:
            with page.expect_response(f"{base}/") as framed:
                page.goto(f"{other}/frame?src={base}/")
            assert framed.value.status == 200  # asked for, and refused to the frame
            # The browser shows its own error page in the frame, not the dashboard.
            frame = page.frame_locator("iframe")
            assert "is blocked" in frame.locator("h1").inner_text()
            assert page.frames[1].url.startswith("chrome-error://")
            assert "Queues" not in page.frames[1].content()


# -- long values ----------------------------------------------------------------------------


def test_long_names_keys_and_errors_wrap_inside_the_page(shop: App, db: Any, page: Any) -> None:
    """The longest names skiplock accepts and errors or payloads holding a long URL: every page
    fits the window (no sideways scrolling), the whole error, payload and tables are in sight
    (no box scrolling them), and times and buttons stay on one line."""
    url = "https://" + "a" * 40 + ".example.com/" + "b" * 150
    task = "t." + "long_task_name." * 13
    queue = "q" * 63

    @shop.task(name=task, queue=queue)
    def long_task(url: str) -> None: ...

    job = shop.enqueue(task, {"url": url}, entity_key="e" * 120).id
    db.execute(
        f"UPDATE \"{shop.schema}\".jobs SET status = 'failed', finished_at = now(), "
        "last_error = %s WHERE id = %s",
        (f"ConnectionError: {url}\n\nTraceback (most recent call last):\n  {url}", job),
    )
    with serving(shop) as base:
        log_in(page, base)
        for path in ("/", "/jobs", f"/jobs?queue={queue}&status=failed", f"/jobs/{job}"):
            page.goto(base + path)
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= page.viewport_size["width"], (path, wide)
            clipped = page.locator("pre, .table").evaluate_all(
                "ps => ps.filter(p => p.scrollWidth > p.clientWidth).map(p => p.innerText)"
            )
            assert clipped == [], path
            lines = page.locator("td[title], button").evaluate_all(
                """tds => tds.filter(td => td.innerText).map(td => {
                    const range = document.createRange();
                    range.selectNodeContents(td);
                    return new Set([...range.getClientRects()].map(r => r.top)).size;
                })"""
            )
            assert set(lines) <= {1}, (path, lines)


# -- attempt history, search, bulk actions with their count, workers, live counts -------------


def test_the_job_page_shows_each_attempt_with_its_worker_outcome_and_error(
    shop: App, page: Any
) -> None:
    runs: list[int] = []

    @shop.task(name="flaky.sync", queue="flaky", max_attempts=5, retry=FixedDelay(0))
    def flaky(n: int) -> None:
        runs.append(n)
        if len(runs) < 3:
            raise ValueError(f"boom {len(runs)}")

    job_id = shop.enqueue("flaky.sync", {"n": 1}).id
    in_thread(lambda: drain(shop, queues=["flaky"], with_scheduled=True))
    with serving(shop) as base:
        log_in(page, base, f"/jobs/{job_id}")
        assert page.locator("h1 .status").inner_text() == "done"
        attempts = table(page, 0)
        assert [(a["attempt"], a["outcome"]) for a in attempts] == [
            ("1", "retried"),
            ("2", "retried"),
            ("3", "done"),
        ]
        assert all(a["worker"] not in ("", "-") for a in attempts)
        assert all(len(a["started"]) == 19 and len(a["ended"]) == 19 for a in attempts)
        assert attempts[0]["error"] == "ValueError: boom 1" and attempts[2]["error"] == ""
        # The whole error with its traceback opens under its last line.
        first = page.locator("#attempts details").first
        assert not first.locator("pre").is_visible()
        first.locator("summary").click()
        assert "Traceback" in first.locator("pre").inner_text()
        screenshot(page, "dashboard-job-attempts")
        shown = open_json(page, f"{base}/api/jobs/{job_id}")
        assert [a["outcome"] for a in shown["attempt_history"]] == ["retried", "retried", "done"]


def test_jobs_are_found_by_payload_field_and_by_id(shop: App, page: Any) -> None:
    ids = [shop.enqueue("mail.send", {"to": f"user{i % 3}@example.com"}).id for i in range(9)]
    report = shop.enqueue("report.build", {"week": 7}).id
    with serving(shop) as base:
        log_in(page, base, "/jobs")
        page.fill('input[name="key"]', "to")
        page.fill('input[name="value"]', "user1@example.com")
        follow(page, page.get_by_role("button", name="Show"), "**/jobs?*key=to*")
        assert listed_ids(page) == list(reversed(ids[1::3]))
        assert "Searched the payloads of 10 jobs (at most 10,000 a page" in page.inner_text("main")
        screenshot(page, "dashboard-search")
        # A JSON value is matched as JSON (a number), with the other filters.
        page.goto(f"{base}/jobs?key=week&value=7&task=report.build")
        assert listed_ids(page) == [report]
        page.goto(f"{base}/jobs?key=week&value=%227%22")  # "7", a string: no job
        assert page.locator("td.muted").inner_text() == "No job matches."
        # Text that looks like SQL is a value like any other.
        page.goto(f"{base}/jobs?key=to&value=%27%29%3B+DROP+TABLE+jobs%3B+--")
        assert page.locator("td.muted").inner_text() == "No job matches."
        response = page.goto(f"{base}/jobs?key={'k' * 201}&value=1")
        assert response.status == 400 and "payload key is 1 to 200" in page.inner_text("body")
        api = open_json(page, f"{base}/api/jobs?key=to&value=user0@example.com")
        assert [j["id"] for j in api["jobs"]] == list(reversed(ids[0::3]))
        assert api["scanned"] == 10 and api["next_before"] is None
        # By id: the job's page.
        page.goto(f"{base}/jobs")
        page.fill('input[name="id"]', str(report))
        follow(page, page.get_by_role("button", name="Open"), f"**/jobs/{report}")
        assert page.locator("h1").inner_text().startswith(f"Job {report}")


def test_bulk_retry_and_cancel_say_how_many_jobs_first_and_change_only_those(
    shop: App, db: Any, page: Any
) -> None:
    jobs = seed(shop)
    more_failed = shop.enqueue("report.build", {"week": 61}).id
    in_thread(lambda: drain(shop, queues=["reports"]))
    unstarted = [shop.enqueue("mail.send", {"to": f"{i}@example.com"}).id for i in range(3)]
    with serving(shop) as base:
        log_in(page, base, "/jobs?status=failed&task=report.build")
        before = statuses(db, shop)
        follow(
            page,
            page.get_by_role("link", name="Retry every failed job of this filter…"),
            "**/jobs/bulk?action=retry*",
        )
        assert "2 jobs will be retried" in page.inner_text("#bulk-count")
        assert statuses(db, shop) == before  # counting changes nothing
        screenshot(page, "dashboard-bulk-confirm")
        click(page, "Retry 2 jobs", "**/jobs?notice=bulk-retried*")
        assert notice(page).startswith("2 jobs will run again; 0 skipped")
        assert {statuses(db, shop)[i] for i in (jobs.failed, more_failed)} == {"pending"}

        # Cancel: every unstarted job of queue emails (pending, waiting), none of another queue.
        page.goto(f"{base}/jobs?queue=emails")
        follow(
            page,
            page.get_by_role("link", name="Cancel every unstarted job of this filter…"),
            "**/jobs/bulk?action=cancel*",
        )
        expected = [jobs.pending, jobs.waiting, *unstarted]
        assert f"{len(expected)} jobs will be cancelled" in page.inner_text("#bulk-count")
        click(page, f"Cancel {len(expected)} jobs", "**/jobs?notice=bulk-cancelled*")
        assert (
            notice(page)
            == f"{len(expected)} jobs cancelled (the jobs of the filter that had not started)."
        )
        after = statuses(db, shop)
        assert {after[i] for i in expected} == {"cancelled"}
        assert after[jobs.scheduled] == "scheduled"  # queue reports
        # Nothing left to cancel: the page says so and has no button.
        page.goto(f"{base}/jobs/bulk?action=cancel&queue=emails")
        assert "0 jobs will be cancelled" in page.inner_text("#bulk-count")
        assert buttons(page) == []
        # A bulk action a status filter does not allow is refused.
        response = page.goto(f"{base}/jobs/bulk?action=cancel&status=running")
        assert response.status == 400


def test_the_workers_page_and_the_queue_counts_update_without_a_reload(
    shop: App, db: Any, page: Any
) -> None:
    seed(shop)
    with serving(shop) as base, working(shop, ["media"]):
        running = shop.enqueue("video.encode", {"seconds": 60}).id
        wait_for(lambda: statuses(db, shop)[running] == "running", 20, "the video job runs")
        wait_for(
            lambda: [w["running"] for w in shop.sync_client.list_workers()] == [1],
            20,
            "the worker reports itself and its running job",
        )
        log_in(page, base, "/")
        follow(page, page.get_by_role("link", name="Workers", exact=True), "**/workers")
        (worker,) = table(page)
        (listed,) = shop.sync_client.list_workers()
        assert worker["worker"] == listed["id"] and worker["host"] == socket.gethostname()
        assert worker["pid"] == str(os.getpid()) and worker["queues"] == "media"
        assert worker["running"] == "1" and worker["last seen"].endswith("s ago")
        screenshot(page, "dashboard-workers")
        follow(page, page.get_by_role("link", name="media"), "**/jobs?queue=media&status=running")
        assert listed_ids(page) == [running]

        # The queues page reads /api/queues every 5 s and writes the counts in place.
        page.goto(f"{base}/")
        page.evaluate("window.notReloaded = true")
        pending = page.locator('tr[data-row="emails"] [data-field="pending"]')
        assert pending.inner_text() == "1"
        for n in range(3):
            shop.enqueue("mail.send", {"to": f"live{n}@example.com"})
        page.wait_for_function(
            """() => document.querySelector('tr[data-row="emails"] [data-field="pending"]')
                       .textContent === "4" """,
            timeout=15_000,
        )
        assert page.evaluate("window.notReloaded") is True
        assert page.inner_text("#queues-live").startswith("Updated ")
        shop.sync_client.cancel_or_request(running)  # let the worker stop at once


def test_a_running_job_page_shows_its_progress_and_updates_it_without_a_reload(
    app: App, page: Any
) -> None:
    next_step = threading.Event()
    finish = threading.Event()

    @app.task(name="pages.render", queue="media", pass_context=True)
    def render(ctx: JobContext) -> None:
        ctx.progress(0.2, "page 2 of 10")
        next_step.wait(30)
        ctx.progress(0.7, "page 7 of 10")
        finish.wait(30)

    job_id = render.enqueue().id
    try:
        with serving(app) as base, working(app, ["media"]):
            wait_for(lambda: progress_of(app, job_id), 20, "the job reports its progress")
            log_in(page, base, f"/jobs/{job_id}")
            page.evaluate("window.notReloaded = true")
            row = table(page, 0)
            assert row == [
                {"status": "running", "progress": "20%", "message": "page 2 of 10",
                 "reported": row[0]["reported"]},
            ]  # fmt: skip
            screenshot(page, "dashboard-job-progress")
            next_step.set()
            page.wait_for_function(
                """() => document.querySelector('#progress [data-field="progress.fraction"]')
                           .textContent === "70%" """,
                timeout=15_000,
            )
            assert page.inner_text('#progress [data-field="progress.status"]') == "page 7 of 10"
            assert page.evaluate("window.notReloaded") is True
            assert page.inner_text("#job-live").startswith("Updated ")
            finish.set()
    finally:
        next_step.set()
        finish.set()


def progress_of(app: App, job_id: int) -> dict[str, Any] | None:
    job = app.sync_client.get_job(job_id)
    return app.sync_client.progress(job) if job is not None else None


# -- charts of the last hour, bulk delete of finished jobs, queue settings -------------------


def test_the_queues_page_charts_the_last_hour_with_tooltips_and_a_table_of_the_numbers(
    shop: App, page: Any
) -> None:
    seed(shop)  # a worker ran report.build twice: one done, one failed, in this minute
    with serving(shop) as base:
        log_in(page, base, "/")
        charts = page.locator("section.charts")
        assert charts.count() == 1 and charts.locator("h3").inner_text() == "reports"
        throughput = page.get_by_role("img", name="Jobs of queue reports finished per minute")
        assert throughput.is_visible()
        assert "1 done, 1 failed" in throughput.locator("desc").text_content()
        assert page.get_by_role("img", name="Jobs of queue reports failed per minute").is_visible()
        wait = page.get_by_role("img", name=re.compile("Wait of queue reports"))
        assert wait.bounding_box()["width"] > 100
        # The bar of this minute: its tooltip says what it stands for.
        tooltip = throughput.locator("g > title").last.text_content() or ""
        assert tooltip.endswith(": done 1, failed 1"), tooltip
        page.get_by_text("The numbers of the charts").click()
        header, *rows = page.locator("#chart-numbers table").evaluate(
            "t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))"
        )
        (row,) = [dict(zip(header, r, strict=True)) for r in rows]
        assert (row["queue"], row["done"], row["failed"]) == ("reports", "1", "1")
        assert float(row["wait max"]) >= 0
        screenshot(page, "dashboard-charts")


def test_bulk_delete_of_finished_jobs_counts_first_and_leaves_a_running_job_alone(
    shop: App, db: Any, page: Any
) -> None:
    jobs = seed(shop)
    with serving(shop) as base, working(shop, ["media"]):
        running = shop.enqueue("video.encode", {"seconds": 60}).id
        wait_for(lambda: statuses(db, shop)[running] == "running", 20, "the video job runs")
        log_in(page, base, "/jobs")  # every queue and status: the running job is in the filter
        assert running in listed_ids(page)
        follow(
            page,
            page.get_by_role("link", name="Delete every finished job of this filter…"),
            "**/jobs/bulk?action=delete*",
        )
        assert "3 jobs will be deleted" in page.inner_text("#bulk-count")
        assert statuses(db, shop)[jobs.done] == "done"  # counting changes nothing
        screenshot(page, "dashboard-bulk-delete")
        click(page, "Delete 3 jobs", "**/jobs?notice=bulk-deleted*")
        assert notice(page).startswith("3 jobs deleted; 0 kept")
        left = statuses(db, shop)
        assert {jobs.done, jobs.failed, jobs.cancelled} & set(left) == set()
        assert left[running] == "running"
        assert [left[i] for i in (jobs.pending, jobs.scheduled, jobs.waiting)] == [
            "pending", "scheduled", "waiting"]  # fmt: skip
        assert listed_ids(page) == sorted(left, reverse=True)
        # Nothing finished is left: the page says so and has no button.
        page.goto(f"{base}/jobs/bulk?action=delete")
        assert "0 jobs will be deleted" in page.inner_text("#bulk-count")
        assert buttons(page) == []
        shop.sync_client.cancel_or_request(running)  # let the worker stop at once


def test_a_queue_limits_page_saves_the_limits_and_shows_what_is_wrong_with_a_value(
    shop: App, db: Any, page: Any
) -> None:
    seed(shop)
    with serving(shop) as base:
        log_in(page, base, "/")
        row = page.locator("tr", has=page.get_by_role("link", name="reports", exact=True))
        follow(page, row.get_by_role("link", name="Limits…"), "**/queues/reports")
        page.get_by_label("Running jobs at most").fill("0")
        click_refused = page.get_by_role("button", name="Save the concurrency limit")
        with page.expect_navigation() as navigation:
            click_refused.click()
        assert navigation.value.status == 400
        assert page.get_by_role("alert").inner_text() == (
            "Concurrency limit '0': must be an integer from 1 to 2147483647 or 'none'."
        )
        assert page.get_by_label("Running jobs at most").input_value() == "0"
        page.get_by_label("Running jobs at most").fill("4")
        click(page, "Save the concurrency limit", "**/queues/reports?notice=settings-saved*")
        page.get_by_label("Job starts at most").fill("10/m")
        click(page, "Save the rate limit", "**/queues/reports?notice=settings-saved*")
        assert notice(page).startswith("The settings of queue reports are saved")
        screenshot(page, "dashboard-queue-limits")
        settings = shop.sync_client.queue_settings("reports")
        assert (settings["concurrency_limit"], settings["rate_limit"]) == (4, 10)
        page.goto(f"{base}/")
        (reports,) = [r for r in table(page, 0) if r["queue"] == "reports"]
        assert reports["settings"] == "at most 4 running, at most 10 starts per 60s"
    with serving(shop, read_only=True) as base:
        log_in(page, base, "/queues/reports")
        assert buttons(page) == [] and "read-only" in page.inner_text("main")
        assert "at most 4 running" in page.inner_text("#queue-settings")
