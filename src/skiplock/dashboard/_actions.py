"""The dashboard's actions: POSTs from its own forms (checked by
:func:`~skiplock.dashboard._access.checked_form`) that change jobs or queues through the App's
client, then redirect back to a page that says what happened."""

from __future__ import annotations

from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from skiplock._rate_limit import parse_concurrency_limit, parse_rate
from skiplock.bulk import JobFilter
from skiplock.dashboard._access import checked_form
from skiplock.dashboard._pages import Pages
from skiplock.dashboard._params import back, bulk_form, bulk_statuses, path_job_id, path_queue
from skiplock.errors import ConfigurationError, IdempotencyConflict, InvalidName, InvalidPayload
from skiplock.job import JobStatus


class Actions(Pages):
    """The changing routes of one dashboard (refused as a whole by a read-only one)."""

    async def set_concurrency_limit(self, request: Request) -> Response:
        """Cap a queue's running jobs, as ``skiplock limit`` does (the same check and
        statement)."""
        form = await checked_form(request)
        queue = path_queue(request)
        text = str(form.get("concurrency") or "").strip() or "none"
        try:
            limit = parse_concurrency_limit(text)
        except ConfigurationError as exc:
            return await self.queue(request, f"Concurrency limit {text!r}: {exc}.",
                                    {"concurrency": text})  # fmt: skip
        await self.client.set_concurrency_limit(queue, limit)
        return back(request, f"/queues/{quote(queue, safe='')}", notice="settings-saved",
                     queue=queue)  # fmt: skip

    async def set_rate_limit(self, request: Request) -> Response:
        """Limit a queue's job starts, as ``skiplock rate`` does (the same check and
        statement)."""
        form = await checked_form(request)
        queue = path_queue(request)
        text = str(form.get("rate") or "").strip() or "none"
        try:
            parsed = parse_rate(text)
        except ConfigurationError as exc:
            return await self.queue(request, f"Rate limit: {exc}.", {"rate": text})
        if parsed is None:
            await self.client.set_rate_limit(queue, None)
        else:
            await self.client.set_rate_limit(queue, *parsed)
        return back(request, f"/queues/{quote(queue, safe='')}", notice="settings-saved",
                     queue=queue)  # fmt: skip

    # -- actions: POST from the dashboard's own forms, then back to a page ----------------

    async def retry_job(self, request: Request) -> Response:
        await checked_form(request)
        job_id = path_job_id(request)
        try:
            notice = "retried" if await self.client.retry_job(job_id) else "not-retried"
        except IdempotencyConflict as exc:
            return back(request, f"/jobs/{job_id}", notice="conflict", job=job_id,
                         holder=exc.holder_id)  # fmt: skip
        except InvalidPayload:
            notice = "refused"
        return back(request, f"/jobs/{job_id}", notice=notice, job=job_id)

    async def cancel_job(self, request: Request) -> Response:
        await checked_form(request)
        job_id = path_job_id(request)
        outcome = await self.client.cancel_or_request(job_id)
        return back(request, f"/jobs/{job_id}", notice=outcome, job=job_id)

    async def retry_failed(self, request: Request) -> Response:
        form = await checked_form(request)
        queue, task = (str(form.get(k) or "") or None for k in ("queue", "task"))
        try:
            jobs = JobFilter(queue=queue, task=task)
        except InvalidName as exc:
            raise HTTPException(400, str(exc)) from None
        done = await self.client.retry_jobs(jobs, [JobStatus.FAILED.value])
        return back(request, "/jobs", notice="bulk-retried", n=done.retried,
                     skipped=done.skipped, status="failed", queue=queue, task=task)  # fmt: skip

    async def bulk_retry(self, request: Request) -> Response:
        form = await checked_form(request)
        jobs, status = bulk_form(form)
        done = await self.client.retry_jobs(jobs, bulk_statuses("retry", status))
        return back(request, "/jobs", notice="bulk-retried", n=done.retried,
                     skipped=done.skipped, status=status, queue=jobs.queue,
                     task=jobs.task)  # fmt: skip

    async def bulk_cancel(self, request: Request) -> Response:
        form = await checked_form(request)
        jobs, status = bulk_form(form)
        bulk_statuses("cancel", status)
        done = await self.client.cancel_jobs(jobs)
        return back(request, "/jobs", notice="bulk-cancelled", n=done.cancelled,
                     queue=jobs.queue, task=jobs.task)  # fmt: skip

    async def bulk_delete(self, request: Request) -> Response:
        form = await checked_form(request)
        jobs, status = bulk_form(form)
        done = await self.client.delete_jobs(jobs, bulk_statuses("delete", status))
        return back(request, "/jobs", notice="bulk-deleted", n=done.deleted,
                     skipped=done.skipped, status=status, queue=jobs.queue,
                     task=jobs.task)  # fmt: skip

    async def pause_queue(self, request: Request) -> Response:
        return await self._set_paused(request, True)

    async def resume_queue(self, request: Request) -> Response:
        return await self._set_paused(request, False)

    async def _set_paused(self, request: Request, paused: bool) -> Response:
        await checked_form(request)
        queue = path_queue(request)
        await self.client.set_paused(queue, paused)
        return back(request, "/", notice="paused" if paused else "resumed", queue=queue)
