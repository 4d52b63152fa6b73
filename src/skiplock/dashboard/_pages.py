"""The dashboard's pages and JSON: queues with charts of their last hour, jobs (filtered, or
found by a payload field), one job with its attempts and progress, workers, a queue's settings,
and the page that counts the jobs a bulk action would change before it is confirmed."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from skiplock._cli.common import describe_read_lag, job_dict
from skiplock._db.client_async import AsyncClient
from skiplock._db.job_charts import CHART_MINUTES, MAX_CHART_MINUTES
from skiplock._db.job_search import SEARCH_SCAN
from skiplock._rate_limit import written
from skiplock.app import App
from skiplock.bulk import JobFilter
from skiplock.dashboard._charts import queue_charts
from skiplock.dashboard._params import (
    back,
    bulk_statuses,
    int_param,
    list_filters,
    path_job_id,
    path_queue,
    payload_param,
    queue_param,
)
from skiplock.job import Job, JobStatus

PAGE_SIZE = 50
NOTICES = {
    "retried": "Job {job} will run again.",
    "not-retried": "Job {job} is not failed or cancelled: nothing changed.",
    "conflict": "Job {job} was not retried: unfinished job {holder} holds its idempotency key.",
    "cancelled": "Job {job} was cancelled.",
    "requested": "The worker running job {job} was asked to cancel it.",
    "held": "Job {job} runs under a held row lock: its worker was asked to cancel it (at once by "
    "NOTIFY; a worker that does not LISTEN reads the request within its poll interval).",
    "unchanged": "Job {job} has finished: nothing changed.",
    "paused": "Queue {queue} is paused: no worker claims its jobs until it is resumed.",
    "resumed": "Queue {queue} runs again.",
    "settings-saved": "The settings of queue {queue} are saved: every worker follows them "
    "within its poll interval.",
    "bulk-retried": "{jobs} will run again; {skipped} skipped (an unfinished job holds their "
    "idempotency key, or they break a bound of the jobs table).",
    "bulk-cancelled": "{jobs} cancelled (the jobs of the filter that had not started).",
    "bulk-deleted": "{jobs} deleted; {skipped} kept (a session held their row, or a waiting "
    "job depends on them).",
    "refused": "Job {job} was not retried: it breaks a bound of the jobs table (see its last "
    "error and docs/security.md).",
}


class Pages:
    """The reading routes of one dashboard over one App."""

    def __init__(self, app: App, templates: Jinja2Templates, *, read_only: bool) -> None:
        self.app = app
        self.client = app.async_client  # actions, on the primary
        self.reader = app.read_async_client  # pages, on the read DSN if there is one
        self.templates = templates
        self.read_only = read_only

    def shown(self, job: Job) -> dict[str, Any]:
        """A job as the dashboard shows it: the values of its task's secret fields hidden."""
        shown = job_dict(job)
        task = self.app.tasks.get(job.task)
        if task is not None and isinstance(job.payload, dict):
            secret = task.settings.secret
            shown["payload"] = {k: "***" if k in secret else v for k, v in job.payload.items()}
        return shown

    async def _shown_in_full(self, job: Job, reader: AsyncClient) -> dict[str, Any]:
        """:meth:`shown`, with the jobs a waiting job depends on (id -> state)."""
        shown = self.shown(job)
        waits_for = await reader.waits_for(job.id) if job.status == "waiting" else []
        shown["waits_for"] = {str(dep): status for dep, status in waits_for}
        shown["attempt_history"] = await reader.attempts(job)
        shown["progress"] = await reader.progress(job)
        return shown

    async def _listed(
        self, request: Request
    ) -> tuple[dict[str, Any], list[Job], int | None, int | None]:
        """The filters of a request, the jobs of its page, the id the next page starts below
        (None: no more) and, for a payload search, how many jobs it read."""
        filters = list_filters(request)
        before = int_param(request, "before")
        payload = payload_param(request)
        if payload is None:
            found = await self._reader(request).list_jobs(**filters, limit=PAGE_SIZE, before=before)
            following = found[-1].id if len(found) == PAGE_SIZE else None
            return filters, found, following, None
        searched = await self._reader(request).search_jobs(
            payload, **filters, limit=PAGE_SIZE, before=before, scan=SEARCH_SCAN
        )
        return filters, searched.jobs, searched.next_before, searched.scanned

    async def _page(
        self, request: Request, name: str, *, primary: bool = False, **context: Any
    ) -> Response:
        """The page ``name``; ``primary``: its figures were read on the primary, not the read
        DSN (else the page says how stale they may be)."""
        notice = request.query_params.get("notice")
        text = None
        if notice in NOTICES:
            params: dict[str, object] = {
                k: int_param(request, k) for k in ("job", "holder", "n", "skipped")
            }
            params["queue"] = queue_param(request.query_params.get("queue"))
            params["jobs"] = f"{params['n']} job" + ("" if params["n"] == 1 else "s")
            text = NOTICES[notice].format(**params)
        return self.templates.TemplateResponse(
            request,
            name,
            {
                "root": request.scope.get("root_path", ""),
                "csrf": request.state.csrf,
                "read_only": self.read_only,
                "schema": self.app.schema,
                "notice": text,
                "stale": None if primary or after_action(request) else await self._staleness(),
                **context,
            },
        )

    def _reader(self, request: Request) -> AsyncClient:
        """Where a page reads: the read client, except on the page an action of this dashboard
        redirected to (it carries the action's notice), which shows the change on the primary."""
        return self.client if after_action(request) else self.reader

    async def _staleness(self) -> str | None:
        """How stale the pages' reads are, when they come from a read DSN (None: the primary)."""
        if self.app.read_dsn is None:
            return None
        return describe_read_lag(await self.reader.read_lag())

    async def queues(self, request: Request) -> Response:
        refresh = int_param(request, "refresh")
        reader = self._reader(request)
        rows = await reader.queue_status()
        history = await reader.finished_per_minute(CHART_MINUTES)
        charts = {
            queue: queue_charts(queue, n, history.minutes, series)
            for n, (queue, series) in enumerate(history.queues.items())
        }
        return await self._page(
            request,
            "queues.html",
            queues=rows,
            workers=await self._workers(reader),
            refresh=refresh and max(refresh, 2),
            history=history,
            charts=charts,
        )

    async def _workers(self, reader: AsyncClient) -> list[dict[str, Any]]:
        """The workers table's rows, as JSON can carry them."""
        rows = await reader.list_workers()
        for row in rows:
            for name in ("started_at", "seen_at"):
                row[name] = row[name].isoformat()
        return rows

    async def jobs(self, request: Request) -> Response:
        wanted = int_param(request, "id")
        if wanted is not None:  # "find a job by id": its page
            return back(request, f"/jobs/{wanted}")
        filters, found, following, scanned = await self._listed(request)
        key, value = (request.query_params.get(k) or "" for k in ("key", "value"))
        kept = {k: v for k, v in {**filters, "key": key, "value": value}.items() if v}
        more = urlencode({**kept, "before": following}) if following is not None else None
        return await self._page(
            request,
            "jobs.html",
            jobs=[self.shown(j) for j in found],
            filters=filters,
            payload_key=key,
            payload_value=value,
            scanned=scanned,
            scan_limit=SEARCH_SCAN,
            statuses=[s.value for s in JobStatus],
            more=more,
            bulk=urlencode({k: v for k, v in filters.items() if v}),
        )

    async def job(self, request: Request) -> Response:
        reader = self._reader(request)
        found = await reader.get_job(path_job_id(request))
        if found is None:
            raise HTTPException(404, f"no job {request.path_params['job_id']}")
        return await self._page(request, "job.html", job=await self._shown_in_full(found, reader))

    async def queue(self, request: Request, error: str | None = None,
                    entered: dict[str, str] | None = None) -> Response:  # fmt: skip
        """A queue's settings, with the forms that change its limits (``error``: what was
        wrong with the value ``entered``, answered with status 400)."""
        queue = path_queue(request)
        settings = await self.client.queue_settings(queue)
        values = {
            "concurrency": str(settings["concurrency_limit"] or "none"),
            "rate": written(settings["rate_limit"], settings["rate_period"])
            if settings["rate_limit"] is not None
            else "none",
            **(entered or {}),
        }
        response = await self._page(request, "queue.html", primary=True, queue=queue,
                                    settings=settings, values=values, error=error)  # fmt: skip
        if error is not None:
            response.status_code = 400
        return response

    async def workers(self, request: Request) -> Response:
        workers = await self._workers(self._reader(request))
        return await self._page(request, "workers.html", workers=workers)

    async def api_queues(self, request: Request) -> Response:
        return JSONResponse(await self.reader.queue_status())

    async def api_charts(self, request: Request) -> Response:
        minutes = int_param(request, "minutes") or CHART_MINUTES
        if minutes > MAX_CHART_MINUTES:
            raise HTTPException(400, f"minutes must be from 1 to {MAX_CHART_MINUTES}")
        return JSONResponse((await self.reader.finished_per_minute(minutes)).to_json())

    async def api_workers(self, request: Request) -> Response:
        return JSONResponse(await self._workers(self.reader))

    async def api_jobs(self, request: Request) -> Response:
        _, found, following, scanned = await self._listed(request)
        answer: dict[str, Any] = {"jobs": [self.shown(j) for j in found], "next_before": following}
        if scanned is not None:
            answer["scanned"] = scanned
        return JSONResponse(answer)

    async def api_job(self, request: Request) -> Response:
        found = await self.reader.get_job(path_job_id(request))
        if found is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        return JSONResponse(await self._shown_in_full(found, self.reader))

    async def bulk_confirm(self, request: Request) -> Response:
        """The page that says how many jobs a bulk retry or cancel of the list's filter would
        change now, with the button that does it."""
        action = request.query_params.get("action")
        filters = list_filters(request)
        statuses = bulk_statuses(action, filters["status"])
        jobs = JobFilter(queue=filters["queue"], task=filters["task"])
        counts = await self.client.count_matching(jobs, statuses)  # what the action would do
        return await self._page(
            request,
            "bulk.html",
            primary=True,
            action=action,
            filters=filters,
            statuses=statuses,
            counts={s: counts.get(s, 0) for s in statuses},
            total=sum(counts.values()),
            back=urlencode({k: v for k, v in filters.items() if v}),
        )


def after_action(request: Request) -> bool:
    """Whether the request is the page an action redirected to (it names the action's notice)."""
    return request.query_params.get("notice") in NOTICES
