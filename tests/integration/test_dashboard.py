"""The web dashboard served by uvicorn, spoken to over HTTP, on a real server: what it shows,
what its actions change in the tables, and who may do either."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from psycopg import sql

from helpers.dashboard_client import TOKEN, Browser, serving, serving_asgi
from skiplock import App, ConfigurationError
from skiplock._db.sql import Queries
from skiplock.bulk import DeletedJobs, JobFilter
from skiplock.dashboard import create_dashboard
from skiplock.testing import drain

SECRET = "canary-hunter22"


@pytest.fixture
def shop(app: App) -> App:
    @app.task(name="mail.send", queue="emails", secret=["password"])
    def send(to: str, password: str) -> None: ...

    @app.task(name="report.build", queue="reports", store_result=True)
    def build(n: int) -> None: ...

    return app


def statuses(db: Any, app: App) -> dict[int, str]:
    return dict(db.execute(f'SELECT id, status FROM "{app.schema}".jobs').fetchall())


def fail(db: Any, app: App, ids: list[int], error: str = "ValueError: boom") -> None:
    db.execute(
        f'UPDATE "{app.schema}".jobs SET status = %s, attempts = max_attempts, last_error = %s, '
        "finished_at = now() WHERE id = ANY(%s)",
        ("failed", error, ids),
    )


def test_pages_show_queues_jobs_and_one_job_with_secret_fields_hidden(shop: App, db: Any) -> None:
    mails = [e.id for e in shop.enqueue_many("mail.send", [
        {"to": f"u{i}@example.com", "password": SECRET} for i in range(3)])]  # fmt: skip
    reports = [e.id for e in shop.enqueue_many("report.build", [{"n": 1}, {"n": 2}])]
    fail(db, shop, mails[:1], f"ValueError: smtp said no\n\nTraceback ...\n  line {mails[0]}")
    db.execute(
        f"UPDATE \"{shop.schema}\".jobs SET status = 'done', result = %s, finished_at = now() "
        "WHERE id = %s",
        (json.dumps({"rows": 42}), reports[0]),
    )
    shop.sync_client.set_concurrency_limit("reports", 2)
    shop.sync_client.set_paused("idle", True)
    shop.sync_client.set_rate_limit("idle", 30, 60)

    with serving(shop) as base:
        browser = Browser(base)
        queues = browser.log_in()
        assert queues.status == 200 and queues.url == base + "/", queues
        rows = {m[0]: m[1] for m in re.findall(r'jobs\?queue=(\w+)">\w+</a></td>(.*?)</tr>',
                                               queues.text, re.S)}  # fmt: skip
        assert set(rows) == {"emails", "reports", "idle"}
        cells = re.findall(r'<td class="n"[^>]*>(?:<a [^>]*>)?(\S+?)(?:</a>)?</td>', rows["emails"])
        assert cells[:7] == ["2", "0", "0", "0", "1", "0", "0"], cells  # pending .. cancelled
        assert "paused" in rows["idle"] and "at most 2 running" in rows["reports"]
        assert "at most 30 starts per 60s" in rows["idle"]

        failed = browser.get("/jobs?status=failed")
        assert re.findall(r'href="/jobs/(\d+)"', failed.text) == [str(mails[0])]
        assert "ValueError: smtp said no" in failed.text and "Traceback" not in failed.text

        everything = browser.get("/jobs")
        listed = [int(i) for i in re.findall(r'href="/jobs/(\d+)"', everything.text)]
        assert listed == sorted(mails + reports, reverse=True)

        one = browser.get(f"/jobs/{mails[1]}")
        assert one.status == 200 and "u1@example.com" in one.text
        assert "<h2>Meta</h2>" not in one.text  # none given
        traced = shop.enqueue("report.build", {"n": 3}, meta={"traceparent": "00-f00d-01"}).id
        assert '"traceparent": "00-f00d-01"' in browser.get(f"/jobs/{traced}").text
        assert SECRET not in one.text and '"password": "***"' in one.text
        api = json.loads(browser.get(f"/api/jobs/{mails[1]}").text)
        assert api["payload"] == {"to": "u1@example.com", "password": "***"}
        assert SECRET not in browser.get("/api/jobs").text

        done = browser.get(f"/jobs/{reports[0]}")
        assert "Result" in done.text and '"rows": 42' in done.text
        with_error = browser.get(f"/jobs/{mails[0]}")
        assert f"line {mails[0]}" in with_error.text  # the whole error, traceback included


def test_the_queues_page_and_the_api_list_the_workers(shop: App, db: Any) -> None:
    with serving(shop) as base:
        browser = Browser(base)
        assert "No worker has reported itself." in browser.log_in().text
        assert json.loads(browser.get("/api/workers").text) == []
        for worker_id, ago in (("web-1:42:aa", 2), ("web-2:7:bb", 90)):
            db.execute(
                f'INSERT INTO "{shop.schema}".workers (id, host, pid, queues, concurrency, '
                "model, version, seen_at, running, finished) VALUES (%s, 'h', 1, "
                "'{emails,reports}', 8, 'lease', '0.1.0', now() - make_interval(secs => %s), "
                "3, 1234)",
                (worker_id, ago),
            )
        page = browser.get("/").text
        rows = dict(re.findall(r"<td>(web-\d:\d+:\w+)</td>(.*?)</tr>", page, re.S))
        assert set(rows) == {"web-1:42:aa", "web-2:7:bb"}
        assert "emails, reports" in rows["web-1:42:aa"] and "1234" in rows["web-1:42:aa"]
        assert "(silent)" in rows["web-2:7:bb"] and "(silent)" not in rows["web-1:42:aa"]
        listed = json.loads(browser.get("/api/workers").text)
        assert [(w["id"], w["silent"], w["running"]) for w in listed] == [
            ("web-1:42:aa", False, 3), ("web-2:7:bb", True, 3),
        ]  # fmt: skip
        assert listed[0]["queues"] == ["emails", "reports"]
        queues = json.loads(browser.get("/api/queues").text)
        assert {q["queue"]: q["workers"] for q in queues} == {"emails": 1, "reports": 1}


def test_lists_page_by_id_and_the_api_says_where_the_next_page_starts(shop: App) -> None:
    ids = [e.id for e in shop.enqueue_many("report.build", [{"n": i} for i in range(61)])]
    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        first = browser.get("/jobs?queue=reports")
        shown = [int(i) for i in re.findall(r'href="/jobs/(\d+)"', first.text)]
        assert shown == sorted(ids, reverse=True)[:50]
        older = re.search(r'href="(/jobs\?[^"]+)">Older jobs', first.text)
        assert older, first.text
        second = browser.get(older.group(1).replace("&amp;", "&"))
        shown = [int(i) for i in re.findall(r'href="/jobs/(\d+)"', second.text)]
        assert shown == sorted(ids, reverse=True)[50:]
        assert "Older jobs" not in second.text

        page = json.loads(browser.get("/api/jobs?queue=reports").text)
        assert [j["id"] for j in page["jobs"]] == sorted(ids, reverse=True)[:50]
        rest = json.loads(browser.get(f"/api/jobs?queue=reports&before={page['next_before']}").text)
        assert [j["id"] for j in rest["jobs"]] == sorted(ids, reverse=True)[50:]
        assert rest["next_before"] is None


def test_actions_change_the_tables_and_say_what_happened(shop: App, db: Any) -> None:
    mails = [e.id for e in shop.enqueue_many("mail.send", [
        {"to": f"u{i}", "password": "p"} for i in range(4)])]  # fmt: skip
    reports = [e.id for e in shop.enqueue_many("report.build", [{"n": 1}, {"n": 2}])]
    fail(db, shop, [mails[0], mails[1], reports[0]])
    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        csrf = browser.get(f"/jobs/{mails[2]}").csrf()

        cancelled = browser.post(f"/jobs/{mails[2]}/cancel", {"csrf": csrf})
        assert cancelled.url == f"{base}/jobs/{mails[2]}?notice=cancelled&job={mails[2]}"
        assert cancelled.notice() == f"Job {mails[2]} was cancelled."
        again = browser.post(f"/jobs/{mails[2]}/cancel", {"csrf": csrf})
        assert again.notice() == f"Job {mails[2]} has finished: nothing changed."

        retried = browser.post(f"/jobs/{mails[0]}/retry", {"csrf": csrf})
        assert retried.notice() == f"Job {mails[0]} will run again."
        not_failed = browser.post(f"/jobs/{mails[3]}/retry", {"csrf": csrf})
        assert "is not failed or cancelled" in (not_failed.notice() or "")

        bulk = browser.post("/jobs/retry-failed", {"csrf": csrf, "queue": "reports", "task": ""})
        assert bulk.notice() == (
            "1 job will run again; 0 skipped (an unfinished job holds their idempotency key, "
            "or they break a bound of the jobs table)."
        )
        assert statuses(db, shop) == {
            mails[0]: "pending", mails[1]: "failed", mails[2]: "cancelled", mails[3]: "pending",
            reports[0]: "pending", reports[1]: "pending",
        }  # fmt: skip

        paused = browser.post("/queues/emails/pause", {"csrf": csrf})
        assert paused.url.startswith(f"{base}/?") and "Queue emails is paused" in paused.text
        assert 'action="/queues/emails/resume"' in paused.text
        assert shop.sync_client.queue_status()[0]["paused"] is True
        browser.post("/queues/emails/resume", {"csrf": csrf})
        assert shop.sync_client.queue_status()[0]["paused"] is False


def test_retrying_a_job_whose_key_is_held_says_which_job_holds_it(app: App, db: Any) -> None:
    app.task(name="charge", queue="billing")(lambda order: None)
    first = app.enqueue("charge", {"order": 1}, idempotency_key="order-1").id
    fail(db, app, [first])
    holder = app.enqueue("charge", {"order": 1}, idempotency_key="order-1").id
    with serving(app) as base:
        browser = Browser(base)
        browser.log_in()
        page = browser.post(f"/jobs/{first}/retry", {"csrf": browser.get(f"/jobs/{first}").csrf()})
        assert page.status == 200
        assert page.notice() == (
            f"Job {first} was not retried: unfinished job {holder} holds its idempotency key."
        )
    assert statuses(db, app)[first] == "failed"


def test_every_request_needs_the_token_and_every_change_a_form_of_ours(shop: App, db: Any) -> None:
    job = shop.enqueue("mail.send", {"to": "a", "password": "p"}).id
    fail(db, shop, [job])
    gets = ["/", "/jobs", f"/jobs/{job}", "/api/queues", "/api/jobs", f"/api/jobs/{job}"]
    posts = [f"/jobs/{job}/retry", f"/jobs/{job}/cancel", "/jobs/retry-failed",
             "/queues/emails/pause", "/queues/emails/resume"]  # fmt: skip
    with serving(shop) as base:
        stranger = Browser(base)
        for path in gets + [f"{p}?token=wrong-{TOKEN}" for p in gets[:1]]:
            page = stranger.get(path)
            assert page.status == 401, (path, page)
            assert page.headers["X-Frame-Options"] == "DENY"
        for path in posts:
            assert stranger.post(path, {"csrf": "x" * 43}).status == 401, path

        bearer = stranger.get("/api/queues", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status == 200 and json.loads(bearer.text)[0]["queue"] == "emails"

        user = Browser(base)
        landing = user.get(f"/jobs?status=failed&token={TOKEN}", follow=False)
        assert landing.status == 303 and landing.headers["Location"] == "/jobs?status=failed"
        cookie = next(c for c in user.jar if c.name.startswith("skiplock_token_"))
        assert cookie.has_nonstandard_attr("HttpOnly")
        page = user.get("/jobs?status=failed")
        # same-origin: a browser then sends the page's own Origin on its form POSTs (with
        # no-referrer it sends "Origin: null"), and no referrer to any other site.
        assert page.status == 200 and page.headers["Referrer-Policy"] == "same-origin"
        # No script but the dashboard's own file: none inline, none of another origin.
        policy = page.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "script-src 'self';" in policy
        assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
        csrf = page.csrf()
        for path in posts:
            for form, headers in (
                ({}, {}),
                ({"csrf": "y" * len(csrf)}, {}),
                ({"csrf": csrf}, {"Origin": "https://evil.example"}),
                ({}, {"Origin": "null"}),
                ({"csrf": "y" * len(csrf)}, {"Origin": "null"}),
            ):
                refused = user.post(path, form, headers=headers)
                assert refused.status == 403, (path, form, headers, refused)
        # Behind a reverse proxy that rewrites Host, the browser's host comes as
        # X-Forwarded-Host: its own origin is accepted, another site's still is not.
        proxied = {"Host": "127.0.0.1:9", "X-Forwarded-Host": "jobs.example.com"}
        evil = user.post("/queues/emails/pause", {"csrf": csrf},
                         headers={**proxied, "Origin": "https://evil.example"})  # fmt: skip
        assert evil.status == 403
        assert statuses(db, shop) == {job: "failed"}
        assert shop.sync_client.queue_status()[0]["paused"] is False
        ours_origin = {**proxied, "Origin": "https://jobs.example.com"}
        ours = user.post("/queues/emails/pause", {"csrf": csrf}, headers=ours_origin, follow=False)
        assert ours.status == 303
        assert shop.sync_client.queue_status()[0]["paused"] is True
        # "Origin: null" (a page that hides its origin) names no origin, and a page of the
        # same site may have set the CSRF cookie itself: the right CSRF value is accepted only
        # with the browser's word (Sec-Fetch-Site) that the dashboard's own page sent it.
        for site in ({}, {"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"}):
            headers = {"Origin": "null", **site}
            tossed = user.post("/queues/emails/resume", {"csrf": csrf}, headers=headers)
            assert tossed.status == 403, site
        assert shop.sync_client.queue_status()[0]["paused"] is True
        null = user.post("/queues/emails/resume", {"csrf": csrf}, headers={"Origin": "null",
                         "Sec-Fetch-Site": "same-origin"}, follow=False)  # fmt: skip
        assert null.status == 303
    assert shop.sync_client.queue_status()[0]["paused"] is False


def test_read_only_has_no_actions_at_all(shop: App, db: Any) -> None:
    job = shop.enqueue("mail.send", {"to": "a", "password": "p"}).id
    fail(db, shop, [job])
    with serving(shop, read_only=True) as base:
        browser = Browser(base)
        for path in ("/", "/jobs?status=failed", f"/jobs/{job}"):
            page = browser.get(f"{path}{'&' if '?' in path else '?'}token={TOKEN}")
            assert page.status == 200 and 'method="post"' not in page.text, path
        refused = browser.post(f"/jobs/{job}/retry", {"csrf": "x" * 43})
        assert refused.status == 403 and "read-only" in refused.text
    assert statuses(db, shop) == {job: "failed"}


def test_a_waiting_job_shows_what_it_waits_for_and_can_be_cancelled(shop: App, db: Any) -> None:
    first = shop.enqueue("mail.send", {"to": "a", "password": "p"}, delay=3600).id
    waiting = shop.enqueue("mail.send", {"to": "b", "password": "p"}, depends_on=[first]).id
    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        page = browser.get(f"/jobs/{waiting}")
        assert page.status == 200 and 'class="status waiting"' in page.text
        link = rf'waits for</dt><dd><a href="[^"]*/jobs/{first}">{first}</a> \(scheduled\)'
        assert re.search(link, page.text), page.text
        api = json.loads(browser.get(f"/api/jobs/{waiting}").text)
        assert api["waits_for"] == {str(first): "scheduled"}
        assert json.loads(browser.get(f"/api/jobs/{first}").text)["waits_for"] == {}
        assert f"/jobs/{waiting}/cancel" in page.text  # the cancel form
        done = browser.post(f"/jobs/{waiting}/cancel", {"csrf": page.csrf()})
        assert done.notice() == f"Job {waiting} was cancelled."
    assert statuses(db, shop)[waiting] == "cancelled"


def test_bad_input_gets_a_clear_answer(shop: App) -> None:
    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        for path, status, text in (
            ("/jobs?status=exploded", 400, "unknown status 'exploded'"),
            ("/jobs?queue=Not%20A%20Queue", 400, "invalid queue name"),
            ("/jobs?before=ten", 400, "before must be a whole number"),
            ("/jobs/987654321", 404, "no job 987654321"),
            ("/api/jobs/987654321", 404, "no such job"),
            ("/jobs?before=99999999999999999999", 400, "before must be a whole number"),
            ("/jobs?before=-3", 400, "before must be a whole number"),
            ("/jobs/99999999999999999999", 404, "no job 99999999999999999999"),
            ("/api/jobs/99999999999999999999", 404, "no job 99999999999999999999"),
        ):
            page = browser.get(path)
            assert (page.status, text in page.text) == (status, True), (path, page)


def test_a_database_that_is_down_is_a_503_that_says_so(pg_dsn: str, schema: str) -> None:
    down = App("postgresql://postgres@127.0.0.1:1/test", schema=schema)
    with serving(down) as base:
        browser = Browser(base)
        page = browser.log_in()
        assert page.status == 503 and "127.0.0.1" in page.text and "1" in page.text, page
        api = browser.get("/api/queues")
        assert api.status == 503 and "error" in json.loads(api.text)


def test_mounted_in_an_application_under_a_prefix(shop: App, db: Any) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    job = shop.enqueue("mail.send", {"to": "a", "password": "p"}).id

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await shop.close_async()  # a mounted application's lifespan does not run: the host's

    # token=None: the host application authenticates (here: nobody; it is a test).
    dashboard = create_dashboard(shop, token=None)
    host = Starlette(routes=[Mount("/ops/jobs", dashboard)], lifespan=lifespan)
    with serving_asgi(host) as base:
        browser = Browser(base)
        queues = browser.get("/ops/jobs/")
        assert queues.status == 200 and 'href="/ops/jobs/jobs?queue=emails"' in queues.text
        page = browser.get(f"/ops/jobs/jobs/{job}")
        assert page.status == 200 and 'action="/ops/jobs/jobs/' in page.text
        cancelled = browser.post(f"/ops/jobs/jobs/{job}/cancel", {"csrf": page.csrf()})
        assert cancelled.url == f"{base}/ops/jobs/jobs/{job}?notice=cancelled&job={job}"
        assert browser.post(f"/ops/jobs/jobs/{job}/retry", {}).status == 403  # no CSRF value
        assert browser.get("/ops/jobs/api/jobs/987654").status == 404
    assert statuses(db, shop) == {job: "cancelled"}
    shop.close()


@pytest.mark.parametrize("path", ["//evil.example/", "///evil.example/x", "/\\evil.example/"])
def test_the_token_redirect_stays_on_the_dashboard(shop: App, path: str) -> None:
    """``?token=`` redirects to the same page without it: never to another host, whatever
    the path looks like (``//host/`` in a Location is another site)."""
    with serving(shop) as base:
        landing = Browser(base).get(f"{path}?token={TOKEN}&status=failed", follow=False)
        assert landing.status == 303
        location = landing.headers["Location"]
        assert location.startswith("/") and location[1:2] not in ("/", "\\"), location
        assert urllib.parse.urlsplit(location).netloc == "", location
        assert "evil.example" in location and location.endswith("?status=failed")


@pytest.mark.parametrize("token", [" " * 16, "\t" * 20, "short", "", "a token with spaces!"])
def test_a_blank_short_or_spaced_token_is_refused(shop: App, token: str) -> None:
    with pytest.raises(ConfigurationError, match="token"):
        create_dashboard(shop, token=token)


# -- charts of the last hour, bulk delete of finished jobs, queue settings -------------------


def finish(db: Any, app: App, ids: list[int], status: str, minutes_ago: int, wait: float) -> Any:
    """Mark jobs finished ``minutes_ago`` whole minutes back (10 s into that minute), each
    started ``wait`` seconds after it was due; the start of that minute, as the server says."""
    db.execute(
        f'UPDATE "{app.schema}".jobs SET status = %s, attempts = 1, '
        "finished_at = date_trunc('minute', now()) - make_interval(mins => %s) + interval '10 s', "
        "run_at = date_trunc('minute', now()) - make_interval(mins => %s), "
        "locked_at = date_trunc('minute', now()) - make_interval(mins => %s) "
        "+ make_interval(secs => %s) WHERE id = ANY(%s)",
        (status, minutes_ago, minutes_ago, minutes_ago, wait, ids),
    )
    row = db.execute("SELECT date_trunc('minute', now()) - make_interval(mins => %s)",
                     (minutes_ago,)).fetchone()  # fmt: skip
    return row[0]


def test_the_queues_page_charts_the_last_hour_per_minute_with_its_numbers(
    shop: App, db: Any
) -> None:
    mails = [e.id for e in shop.enqueue_many("mail.send", [
        {"to": f"u{i}@example.com", "password": "x"} for i in range(6)])]  # fmt: skip
    reports = [e.id for e in shop.enqueue_many("report.build", [{"n": 1}, {"n": 2}])]
    minute = finish(db, shop, mails[:2], "done", 2, 2.0)
    finish(db, shop, mails[2:3], "done", 2, 4.0)
    finish(db, shop, mails[3:4], "failed", 2, 1.0)
    finish(db, shop, mails[4:5], "cancelled", 2, 1.0)  # not a throughput
    finish(db, shop, reports[:1], "done", 70, 1.0)  # before the window

    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        answer = json.loads(browser.get("/api/charts").text)
        assert len(answer["minutes"]) == 60 and answer["whole_from"] is None
        assert answer["scanned"] == 4 and list(answer["queues"]) == ["emails"]
        at = [m[:16] for m in answer["minutes"]].index(minute.isoformat()[:16])
        series = answer["queues"]["emails"]
        assert series[at]["done"] == 3 and series[at]["failed"] == 1
        assert series[at]["wait_max"] == 4.0 and series[at]["wait_mean"] == 2.25
        assert sum(m["done"] + m["failed"] for m in series) == 4

        page = browser.get("/")
        svgs = re.findall(r'<svg class="chart" id="(chart-0-\w+)" role="img"', page.text)
        assert svgs == ["chart-0-throughput", "chart-0-failures", "chart-0-wait"]
        assert '<title id="chart-0-throughput-t">Jobs of queue emails finished per minute' in (
            page.text
        )
        assert "3 done, 1 failed" in page.text  # the chart's description
        hhmm = minute.strftime("%H:%M")
        assert f"<title>{hhmm}: done 3, failed 1</title>" in page.text  # a bar's tooltip
        numbers = re.search(r'<details id="chart-numbers">(.*?)</details>', page.text, re.S)
        assert numbers is not None
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", numbers.group(1))
        # The 95th percentile is the upper bound of its wait bucket (4 s is in the bucket up
        # to 2^(48/4) ms), capped at the minute's max.
        assert cells == ["emails", hhmm, "3", "1", "2.25", "4.00", "4.00"], cells

        assert browser.get("/api/charts?minutes=1441").status == 400
        assert len(json.loads(browser.get("/api/charts?minutes=5").text)["minutes"]) == 5

    # The read is bounded: past its bound, the page says from which minute on it is whole.
    bounded = shop.sync_client.finished_per_minute(scan=2)
    assert bounded.scanned == 2 and bounded.whole_from is not None


def test_the_charts_read_the_finished_jobs_index_alone(shop: App, db: Any) -> None:
    """The charts' statement can be answered from jobs_finished_idx without a heap page per job
    (migration 0023): with the plain scans ruled out, the plan is an index-only scan."""
    ids = [e.id for e in shop.enqueue_many("report.build", [{"n": i} for i in range(50)])]
    finish(db, shop, ids, "done", 1, 1.0)
    db.execute(f'VACUUM ANALYZE "{shop.schema}".jobs')
    statement = Queries(shop.schema)["job_finished_per_minute"]
    with db.transaction():
        db.execute("SET LOCAL enable_seqscan = off")
        db.execute("SET LOCAL enable_bitmapscan = off")
        ((plan,),) = db.execute(
            sql.SQL("EXPLAIN (FORMAT JSON) ") + statement, {"minutes": 60, "scan": 1000}
        ).fetchall()

    def scans(node: dict[str, Any]) -> list[tuple[str, str]]:
        found = (
            [(node["Node Type"], node.get("Index Name", ""))] if "Scan" in node["Node Type"] else []
        )
        return found + [s for child in node.get("Plans", []) for s in scans(child)]

    assert ("Index Only Scan", "jobs_finished_idx") in scans(plan[0]["Plan"]), plan


def test_jobs_deleted_or_pruned_after_they_finished_stay_in_the_charts(shop: App, db: Any) -> None:
    """The bulk delete and the retention's prune count the done and failed jobs they delete
    (finished within a day) in the statement that deletes them; the page says every job counts."""
    mails = [e.id for e in shop.enqueue_many("mail.send", [
        {"to": f"u{i}@example.com", "password": "x"} for i in range(4)])]  # fmt: skip
    report = shop.enqueue("report.build", {"n": 1}).id
    minute = finish(db, shop, mails[:3], "done", 1, 0.5)
    finish(db, shop, mails[3:4], "failed", 1, 0.5)
    finish(db, shop, [report], "done", 3, 8.0)

    def charted() -> tuple[int, int, float | None]:
        chart = shop.sync_client.finished_per_minute()
        at = chart.minutes.index(minute)
        every = [m for series in chart.queues.values() for m in series]
        return (sum(m.done for m in every), sum(m.failed for m in every),
                chart.queues["emails"][at].wait_mean)  # fmt: skip

    assert charted() == (4, 1, 0.5)
    shop.delete_jobs(queue="emails", older_than=30)  # a bulk delete of jobs of the last hour
    assert db.execute(f'SELECT count(*) FROM "{shop.schema}".jobs').fetchone() == (1,)
    assert charted() == (4, 1, 0.5), "bulk-deleted jobs stay in the charts"
    assert shop.sync_client.prune({"done": 60})["done"] == 1  # a retention under an hour
    assert charted() == (4, 1, 0.5), "pruned jobs stay in the charts"
    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        note = re.search(r'<h2 id="last-hour">.*?</p>', browser.get("/").text, re.S)
        assert note is not None
        said = " ".join(note.group(0).split())
        for told in ("Every job counts once", "deleted or archived when done", "pruned",
                     "skiplock delete", "docs/dashboard.md"):  # fmt: skip
            assert told in said, said


def test_bulk_delete_counts_first_and_deletes_only_finished_jobs_of_the_filter(
    shop: App, db: Any
) -> None:
    mails = [e.id for e in shop.enqueue_many("mail.send", [
        {"to": f"u{i}@example.com", "password": "x"} for i in range(7)])]  # fmt: skip
    report = shop.enqueue("report.build", {"n": 1}).id
    finish(db, shop, mails[:2], "done", 1, 0.0)
    finish(db, shop, [mails[2], report], "failed", 1, 0.0)
    finish(db, shop, mails[3:4], "cancelled", 1, 0.0)
    db.execute(
        f"UPDATE \"{shop.schema}\".jobs SET status = 'running', attempts = 1, locked_by = 'w', "
        "locked_at = now(), locked_until = now() + interval '1 minute' WHERE id = %s",
        (mails[4],),
    )
    # A failed job a waiting job depends on stays: gone, it would count as done.
    failed_dependency = mails[5]
    finish(db, shop, [failed_dependency], "failed", 1, 0.0)
    waiting = shop.enqueue("mail.send", {"to": "w", "password": "x"},
                           depends_on=[failed_dependency]).id  # fmt: skip
    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        listed = browser.get("/jobs?queue=emails")
        assert "/jobs/bulk?action=delete&amp;queue=emails" in listed.text
        confirm = browser.get("/jobs/bulk?action=delete&queue=emails")
        assert confirm.status == 200
        count = re.search(r'<p id="bulk-count"><strong>(\d+) jobs</strong> will be\s+deleted',
                          confirm.text)  # fmt: skip
        assert count is not None and count.group(1) == "5", confirm.text
        assert statuses(db, shop)[mails[0]] == "done"  # counting changes nothing
        for status in ("running", "pending", "scheduled", "waiting"):
            refused = browser.get(f"/jobs/bulk?action=delete&queue=emails&status={status}")
            assert refused.status == 400, status
            posted = browser.post("/jobs/bulk/delete", {"csrf": confirm.csrf(), "queue": "emails",
                                                        "status": status})  # fmt: skip
            assert posted.status == 400, status
        done = browser.post(
            "/jobs/bulk/delete", {"csrf": confirm.csrf(), "queue": "emails", "status": ""}
        )
        assert done.notice() == (
            "4 jobs deleted; 1 kept (a session held their row, or a waiting job depends on them)."
        )
    left = statuses(db, shop)
    assert left == {mails[4]: "running", mails[5]: "failed", mails[6]: "pending",
                    report: "failed", waiting: "waiting"}  # fmt: skip

    # The client, in batches of 2, by status; never an unfinished status.
    finish(db, shop, [mails[6]], "done", 1, 0.0)
    assert shop.sync_client.delete_jobs(JobFilter(), ["failed", "done"], batch=2) == DeletedJobs(
        2, 1
    )
    with pytest.raises(ValueError, match="only finished jobs can be deleted"):
        shop.sync_client.delete_jobs(JobFilter(), ["running"])
    with pytest.raises(ValueError, match="only finished jobs can be deleted"):
        shop.delete_jobs(statuses=["pending"])
    # The App's method: finished within the last 10 s is none of them (they finished a minute
    # or more ago).
    assert shop.delete_jobs(finished_within=10) == DeletedJobs(0, 0)
    assert statuses(db, shop) == {mails[4]: "running", mails[5]: "failed", waiting: "waiting"}
    assert shop.delete_jobs(queue="emails") == DeletedJobs(0, 1)  # the dependency stays


def test_a_queue_page_sets_its_limits_as_the_cli_does_and_says_what_is_wrong(
    shop: App, db: Any
) -> None:
    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        queues = browser.get("/")
        assert 'href="/queues/emails">Limits…</a>' not in queues.text  # no jobs, no settings yet
        shop.enqueue("mail.send", {"to": "a", "password": "x"})
        assert 'href="/queues/emails">Limits…</a>' in browser.get("/").text
        page = browser.get("/queues/emails")
        assert page.status == 200 and 'name="concurrency" value="none"' in page.text
        saved = browser.post("/queues/emails/limit", {"csrf": page.csrf(), "concurrency": "3"})
        assert saved.url.endswith("/queues/emails?notice=settings-saved&queue=emails")
        assert saved.notice() is not None and saved.notice().startswith(
            "The settings of queue emails are saved"
        )
        assert "at most 3 running, across all workers" in saved.text
        saved = browser.post("/queues/emails/rate", {"csrf": page.csrf(), "rate": "100/m"})
        assert 'name="rate" value="100/m"' in saved.text
        assert shop.sync_client.queue_settings("emails") == {
            "paused": False, "concurrency_limit": 3, "rate_limit": 100, "rate_period": 60.0,
            "aging_step": None,
        }  # fmt: skip
        for field, value, said in (
            (
                "limit",
                "0",
                "Concurrency limit &#39;0&#39;: must be an integer from 1 to 2147483647",
            ),
            ("limit", "2147483648", "must be an integer from 1 to 2147483647 or &#39;none&#39;"),
            ("limit", "three", "Concurrency limit &#39;three&#39;"),
            ("rate", "0/s", "Rate limit: a rate limit is a whole number of starts &gt;= 1"),
            ("rate", "10 per minute", "Rate limit: rate &#39;10 per minute&#39;: write N/s"),
        ):
            name = "concurrency" if field == "limit" else "rate"
            bad = browser.post(f"/queues/emails/{field}", {"csrf": page.csrf(), name: value})
            assert bad.status == 400 and said in bad.text, (value, bad.text)
            assert f'name="{name}" value="{value}"' in bad.text  # kept for correcting
        assert shop.sync_client.queue_settings("emails")["concurrency_limit"] == 3
        browser.post("/queues/emails/limit", {"csrf": page.csrf(), "concurrency": ""})
        browser.post("/queues/emails/rate", {"csrf": page.csrf(), "rate": "none"})
        assert shop.sync_client.queue_settings("emails") == {
            "paused": False, "concurrency_limit": None, "rate_limit": None, "rate_period": None,
            "aging_step": None,
        }  # fmt: skip
        assert browser.get("/queues/bad%20name").status == 400
        foreign = browser.post("/queues/emails/limit", {"csrf": page.csrf(), "concurrency": "1"},
                               headers={"Origin": "http://evil.example"})  # fmt: skip
        assert foreign.status == 403
        assert browser.post("/queues/emails/limit", {"concurrency": "1"}).status == 403  # no CSRF
    assert shop.sync_client.queue_settings("emails")["concurrency_limit"] is None
    with serving(shop, read_only=True) as base:
        browser = Browser(base)
        browser.log_in()
        page = browser.get("/queues/emails")
        assert page.status == 200 and 'method="post"' not in page.text
        refused = browser.post("/queues/emails/limit", {"csrf": "x" * 43, "concurrency": "1"})
        assert refused.status == 403 and "read-only" in refused.text
    assert shop.sync_client.queue_settings("emails")["concurrency_limit"] is None


@pytest.mark.parametrize("completion", ["delete", "archive"])
def test_jobs_that_leave_the_table_when_done_are_still_charted_once(
    pg_dsn: str, schema: str, shop: App, db: Any, completion: str
) -> None:
    """A job of completion="delete" or "archive" leaves the jobs table in the statement that
    finishes it; that statement counts it for the charts, so it is charted exactly once (and a
    failed job, which stays in the table, is charted from its row)."""
    gone = App(pg_dsn, schema, completion=completion)
    try:

        @gone.task(name="mail.send", queue="emails")
        def send(n: int) -> None: ...

        @gone.task(name="mail.bad", queue="emails", max_attempts=1)
        def bad() -> None:
            raise ValueError("boom")

        gone.enqueue_many("mail.send", [{"n": i} for i in range(3)])
        gone.enqueue("mail.bad", {})
        drain(gone)
    finally:
        gone.close()
    left = db.execute(f'SELECT status FROM "{schema}".jobs').fetchall()
    assert left == [("failed",)], left  # the done ones left the table
    charts = shop.sync_client.finished_per_minute()
    series = charts.queues["emails"]
    assert (sum(m.done for m in series), sum(m.failed for m in series)) == (3, 1)
    charted = [m for m in series if m.done]
    assert all(m.wait_p95 is not None and m.wait_max is not None for m in charted)
    assert all(m.wait_p95 <= m.wait_max for m in charted)  # type: ignore[operator]
    with serving(shop) as base:
        browser = Browser(base)
        browser.log_in()
        answer = json.loads(browser.get("/api/charts").text)
        got = answer["queues"]["emails"]
        assert (sum(m["done"] for m in got), sum(m["failed"] for m in got)) == (3, 1)


def test_the_leader_forgets_the_counts_older_than_a_day(shop: App, db: Any) -> None:
    counts = f'"{shop.schema}".finished_counts'
    db.execute(
        f"INSERT INTO {counts} (minute, queue, done, failed, wait_sum, wait_max, buckets, counts) "
        "SELECT date_trunc('minute', now()) - age, 'emails', 1, 0, 0, 0, '{0}', '{1}' "
        "FROM unnest(ARRAY[interval '1 day 1 minute', interval '23 hours']) AS age"
    )
    store = shop.sync_client.store
    with shop.sync_client.connection() as conn:
        assert store.job_finished_counts_prune(conn) == 1
        assert store.job_finished_counts_prune(conn) == 0
    assert db.execute(f"SELECT count(*) FROM {counts}").fetchone() == (1,)


def test_the_leader_merges_a_past_minutes_counts_into_one_row_and_the_charts_agree(
    shop: App, db: Any
) -> None:
    counts = f'"{shop.schema}".finished_counts'
    past, current = db.execute(
        "SELECT date_trunc('minute', now()) - interval '3 minutes', date_trunc('minute', now())"
    ).fetchone()
    db.execute(
        f"INSERT INTO {counts} (minute, queue, done, failed, wait_sum, wait_max, buckets, counts) "
        "VALUES (%(past)s, 'emails', 2, 1, 6, 4,"
        "        '{40,48}', '{1,2}'),"
        "       (%(past)s, 'emails', 1, 0, 1, 1,"
        "        '{40}', '{1}'),"
        "       (%(past)s, 'reports', 1, 0, 1, 1,"
        "        '{40}', '{1}'),"
        "       (%(current)s, 'emails', 1, 0, 1, 1, '{40}', '{1}'),"
        "       (%(current)s, 'emails', 1, 0, 1, 1, '{40}', '{1}')",
        {"past": past, "current": current},
    )
    before = shop.sync_client.finished_per_minute()
    store = shop.sync_client.store
    with shop.sync_client.connection() as conn:
        assert store.job_finished_counts_merge(conn) == 2  # the past minute's two of emails
        assert store.job_finished_counts_merge(conn) == 0
    rows = db.execute(
        f"SELECT queue, done, failed, wait_sum, wait_max, buckets, counts FROM {counts} "
        "WHERE minute = %s ORDER BY queue",
        (past,),
    ).fetchall()
    assert rows == [("emails", 3, 1, 7.0, 4.0, [40, 48], [2, 2]),
                    ("reports", 1, 0, 1.0, 1.0, [40], [1])]  # fmt: skip
    assert shop.sync_client.finished_per_minute().queues == before.queues
    series = before.queues["emails"]
    at = series[before.minutes.index(past)]
    assert at.done == 3 and at.failed == 1 and at.wait_mean == 7 / 4
    assert at.wait_p95 == 4.0  # in bucket 48 (up to 4.096 s), capped at the max
    assert series[before.minutes.index(current)].done == 2
