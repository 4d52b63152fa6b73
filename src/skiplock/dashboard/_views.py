"""The dashboard's pages and JSON (queues with charts of their last hour, jobs, one job with
its attempts, workers) and its actions (retry, cancel, pause, resume, a queue's concurrency
and rate limits, and retry, cancel or delete every job a filter selects, after a page that
says how many that is).

It reads and changes jobs only through the App's clients, with the CLI's own statements: no SQL
of its own.  Pages read through the app's read client (a standby, when the app has a read DSN:
each page then says how far behind the primary it is); every action, the pages that lead to one
(a queue's settings, a bulk action's count) and the page an action redirects to read and write
on the primary.  Lists are pages of :data:`PAGE_SIZE` jobs,
newest first, paged by id; a search by a payload field reads at most
:data:`~skiplock._db.job_search.SEARCH_SCAN` jobs a page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from skiplock._cli.admin import describe_read_lag, job_dict
from skiplock._db.bounds import check_queue_name, check_task_name
from skiplock._db.client_async import AsyncClient
from skiplock._db.job_charts import CHART_MINUTES, MAX_CHART_MINUTES
from skiplock._db.job_search import SEARCH_SCAN, payload_filter
from skiplock._rate_limit import parse_concurrency_limit, parse_rate, written
from skiplock.app import App
from skiplock.bulk import JobFilter
from skiplock.dashboard._access import checked_form
from skiplock.dashboard._charts import queue_charts
from skiplock.dashboard._static import live_js
from skiplock.errors import ConfigurationError, IdempotencyConflict, InvalidName, InvalidPayload
from skiplock.job import Job, JobStatus

PAGE_SIZE = 50
BIGINT_END = 2**63  # ids and counts beyond a bigint are refused before any statement
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
Endpoint = Callable[[Request], Awaitable[Response]]


class Views:
    """The routes of one dashboard over one App."""

    def __init__(self, app: App, templates: Jinja2Templates, *, read_only: bool) -> None:
        self.app = app
        self.client = app.async_client  # actions, on the primary
        self.reader = app.read_async_client  # pages, on the read DSN if there is one
        self.templates = templates
        self.read_only = read_only

    def routes(self) -> list[Route]:
        reading = [
            Route("/", self.queues, name="queues"),
            Route("/jobs", self.jobs, name="jobs"),
            Route("/jobs/{job_id:int}", self.job, name="job"),
            Route("/jobs/bulk", self.bulk_confirm, name="bulk"),
            Route("/workers", self.workers, name="workers"),
            Route("/queues/{queue}", self.queue, name="queue"),
            Route("/static/live.js", live_js),
            Route("/api/queues", self.api_queues),
            Route("/api/workers", self.api_workers),
            Route("/api/charts", self.api_charts),
            Route("/api/jobs", self.api_jobs),
            Route("/api/jobs/{job_id:int}", self.api_job),
        ]
        changing: list[tuple[str, Endpoint]] = [
            ("/jobs/{job_id:int}/retry", self.retry_job),
            ("/jobs/{job_id:int}/cancel", self.cancel_job),
            ("/jobs/retry-failed", self.retry_failed),
            ("/jobs/bulk/retry", self.bulk_retry),
            ("/jobs/bulk/cancel", self.bulk_cancel),
            ("/jobs/bulk/delete", self.bulk_delete),
            ("/queues/{queue}/pause", self.pause_queue),
            ("/queues/{queue}/resume", self.resume_queue),
            ("/queues/{queue}/limit", self.set_concurrency_limit),
            ("/queues/{queue}/rate", self.set_rate_limit),
        ]
        return reading + [
            Route(path, _refuse_read_only if self.read_only else fn, methods=["POST"])
            for path, fn in changing
        ]

    # -- what the pages show ---------------------------------------------------------------

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
        filters = _filters(request)
        before = _int_param(request, "before")
        payload = _payload_param(request)
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
                k: _int_param(request, k) for k in ("job", "holder", "n", "skipped")
            }
            params["queue"] = _queue_param(request.query_params.get("queue"))
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
                "stale": None if primary or _after_action(request) else await self._staleness(),
                **context,
            },
        )

    def _reader(self, request: Request) -> AsyncClient:
        """Where a page reads: the read client, except on the page an action of this dashboard
        redirected to (it carries the action's notice), which shows the change on the primary."""
        return self.client if _after_action(request) else self.reader

    async def _staleness(self) -> str | None:
        """How stale the pages' reads are, when they come from a read DSN (None: the primary)."""
        if self.app.read_dsn is None:
            return None
        return describe_read_lag(await self.reader.read_lag())

    async def queues(self, request: Request) -> Response:
        refresh = _int_param(request, "refresh")
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
        wanted = _int_param(request, "id")
        if wanted is not None:  # "find a job by id": its page
            return _back(request, f"/jobs/{wanted}")
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
        found = await reader.get_job(_job_id(request))
        if found is None:
            raise HTTPException(404, f"no job {request.path_params['job_id']}")
        return await self._page(request, "job.html", job=await self._shown_in_full(found, reader))

    async def queue(self, request: Request, error: str | None = None,
                    entered: dict[str, str] | None = None) -> Response:  # fmt: skip
        """A queue's settings, with the forms that change its limits (``error``: what was
        wrong with the value ``entered``, answered with status 400)."""
        queue = _path_queue(request)
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

    async def set_concurrency_limit(self, request: Request) -> Response:
        """Cap a queue's running jobs, as ``skiplock limit`` does (the same check and
        statement)."""
        form = await checked_form(request)
        queue = _path_queue(request)
        text = str(form.get("concurrency") or "").strip() or "none"
        try:
            limit = parse_concurrency_limit(text)
        except ConfigurationError as exc:
            return await self.queue(request, f"Concurrency limit {text!r}: {exc}.",
                                    {"concurrency": text})  # fmt: skip
        await self.client.set_concurrency_limit(queue, limit)
        return _back(request, f"/queues/{quote(queue, safe='')}", notice="settings-saved",
                     queue=queue)  # fmt: skip

    async def set_rate_limit(self, request: Request) -> Response:
        """Limit a queue's job starts, as ``skiplock rate`` does (the same check and
        statement)."""
        form = await checked_form(request)
        queue = _path_queue(request)
        text = str(form.get("rate") or "").strip() or "none"
        try:
            parsed = parse_rate(text)
        except ConfigurationError as exc:
            return await self.queue(request, f"Rate limit: {exc}.", {"rate": text})
        if parsed is None:
            await self.client.set_rate_limit(queue, None)
        else:
            await self.client.set_rate_limit(queue, *parsed)
        return _back(request, f"/queues/{quote(queue, safe='')}", notice="settings-saved",
                     queue=queue)  # fmt: skip

    async def workers(self, request: Request) -> Response:
        workers = await self._workers(self._reader(request))
        return await self._page(request, "workers.html", workers=workers)

    async def api_queues(self, request: Request) -> Response:
        return JSONResponse(await self.reader.queue_status())

    async def api_charts(self, request: Request) -> Response:
        minutes = _int_param(request, "minutes") or CHART_MINUTES
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
        found = await self.reader.get_job(_job_id(request))
        if found is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        return JSONResponse(await self._shown_in_full(found, self.reader))

    # -- actions: POST from the dashboard's own forms, then back to a page ----------------

    async def retry_job(self, request: Request) -> Response:
        await checked_form(request)
        job_id = _job_id(request)
        try:
            notice = "retried" if await self.client.retry_job(job_id) else "not-retried"
        except IdempotencyConflict as exc:
            return _back(request, f"/jobs/{job_id}", notice="conflict", job=job_id,
                         holder=exc.holder_id)  # fmt: skip
        except InvalidPayload:
            notice = "refused"
        return _back(request, f"/jobs/{job_id}", notice=notice, job=job_id)

    async def cancel_job(self, request: Request) -> Response:
        await checked_form(request)
        job_id = _job_id(request)
        outcome = await self.client.cancel_or_request(job_id)
        return _back(request, f"/jobs/{job_id}", notice=outcome, job=job_id)

    async def retry_failed(self, request: Request) -> Response:
        form = await checked_form(request)
        queue, task = (str(form.get(k) or "") or None for k in ("queue", "task"))
        try:
            jobs = JobFilter(queue=queue, task=task)
        except InvalidName as exc:
            raise HTTPException(400, str(exc)) from None
        done = await self.client.retry_jobs(jobs, [JobStatus.FAILED.value])
        return _back(request, "/jobs", notice="bulk-retried", n=done.retried,
                     skipped=done.skipped, status="failed", queue=queue, task=task)  # fmt: skip

    async def bulk_confirm(self, request: Request) -> Response:
        """The page that says how many jobs a bulk retry or cancel of the list's filter would
        change now, with the button that does it."""
        action = request.query_params.get("action")
        filters = _filters(request)
        statuses = _bulk_statuses(action, filters["status"])
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

    async def bulk_retry(self, request: Request) -> Response:
        form = await checked_form(request)
        jobs, status = _bulk_form(form)
        done = await self.client.retry_jobs(jobs, _bulk_statuses("retry", status))
        return _back(request, "/jobs", notice="bulk-retried", n=done.retried,
                     skipped=done.skipped, status=status, queue=jobs.queue,
                     task=jobs.task)  # fmt: skip

    async def bulk_cancel(self, request: Request) -> Response:
        form = await checked_form(request)
        jobs, status = _bulk_form(form)
        _bulk_statuses("cancel", status)
        done = await self.client.cancel_jobs(jobs)
        return _back(request, "/jobs", notice="bulk-cancelled", n=done.cancelled,
                     queue=jobs.queue, task=jobs.task)  # fmt: skip

    async def bulk_delete(self, request: Request) -> Response:
        form = await checked_form(request)
        jobs, status = _bulk_form(form)
        done = await self.client.delete_jobs(jobs, _bulk_statuses("delete", status))
        return _back(request, "/jobs", notice="bulk-deleted", n=done.deleted,
                     skipped=done.skipped, status=status, queue=jobs.queue,
                     task=jobs.task)  # fmt: skip

    async def pause_queue(self, request: Request) -> Response:
        return await self._set_paused(request, True)

    async def resume_queue(self, request: Request) -> Response:
        return await self._set_paused(request, False)

    async def _set_paused(self, request: Request, paused: bool) -> Response:
        await checked_form(request)
        queue = _path_queue(request)
        await self.client.set_paused(queue, paused)
        return _back(request, "/", notice="paused" if paused else "resumed", queue=queue)


def _after_action(request: Request) -> bool:
    """Whether the request is the page an action redirected to (it names the action's notice)."""
    return request.query_params.get("notice") in NOTICES


async def _refuse_read_only(request: Request) -> Response:
    raise HTTPException(403, "this dashboard is read-only: it changes nothing")


def _back(request: Request, path: str, **params: Any) -> Response:
    """303 to a page of the dashboard, with what happened in its address."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    query = f"?{query}" if query else ""
    return RedirectResponse(f"{request.scope.get('root_path', '')}{path}{query}", 303)


def _int_param(request: Request, name: str) -> int | None:
    """A whole-number query parameter (absent: None); 400 unless it fits a bigint."""
    value = request.query_params.get(name)
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number < BIGINT_END:
        raise HTTPException(400, f"{name} must be a whole number") from None
    return number


def _job_id(request: Request) -> int:
    """The job id of the route; an id no bigint holds is a job that does not exist."""
    job_id: int = request.path_params["job_id"]
    if job_id >= BIGINT_END:
        raise HTTPException(404, f"no job {job_id}")
    return job_id


def _path_queue(request: Request) -> str:
    """The queue named in the route; 400 for a name no queue can have."""
    queue = _queue_param(request.path_params["queue"])
    if queue is None:
        raise HTTPException(400, "invalid queue name")
    return queue


def _queue_param(value: str | None) -> str | None:
    try:
        return check_queue_name(value) if value else None
    except InvalidName:
        return None


UNSTARTED = ("waiting", "scheduled", "pending")
FINISHED = ("done", "failed", "cancelled")


def _bulk_statuses(action: str | None, status: str | None) -> list[str]:
    """The statuses a bulk action takes jobs from: a retry, failed jobs (or the cancelled ones,
    when the list shows those); a cancel, every job not started, and only from a list not
    filtered by status (it cancels waiting, scheduled and pending jobs alike); a delete, the
    finished jobs of the list's status, or all three finished statuses.  400 else."""
    if action == "retry" and status in (None, "failed", "cancelled"):
        return [status or "failed"]
    if action == "cancel" and status is None:
        return list(UNSTARTED)
    if action == "delete" and status in (None, *FINISHED):
        return [status] if status else list(FINISHED)
    raise HTTPException(400, f"no bulk {action or 'action'} of the jobs of status {status}")


def _bulk_form(form: Any) -> tuple[JobFilter, str | None]:
    """The filter (queue, task) and status a bulk action's form carries, checked."""
    queue, task, status = (str(form.get(k) or "") or None for k in ("queue", "task", "status"))
    try:
        return JobFilter(queue=queue, task=task), status
    except InvalidName as exc:
        raise HTTPException(400, str(exc)) from None


def _payload_param(request: Request) -> str | None:
    """The payload filter (``key`` = ``value``) as JSON text, None without a key; 400 if bad."""
    key = request.query_params.get("key") or ""
    if not key:
        return None
    try:
        return payload_filter(key, request.query_params.get("value") or "")
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


def _filters(request: Request) -> dict[str, Any]:
    """The list filters of a request (queue, status, task; absent: None), checked."""
    params = request.query_params
    queue, status, task = (params.get(k) or None for k in ("queue", "status", "task"))
    try:
        if queue is not None:
            check_queue_name(queue)
        if task is not None:
            check_task_name(task)
    except InvalidName as exc:
        raise HTTPException(400, str(exc)) from None
    if status is not None and status not in {s.value for s in JobStatus}:
        raise HTTPException(400, f"unknown status {status!r}")
    return {"queue": queue, "status": status, "task": task}
