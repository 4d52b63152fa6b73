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

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from skiplock.dashboard._actions import Actions
from skiplock.dashboard._pages import PAGE_SIZE
from skiplock.dashboard._params import refuse_read_only
from skiplock.dashboard._static import live_js

__all__ = ["PAGE_SIZE", "Views"]

Endpoint = Callable[[Request], Awaitable[Response]]


class Views(Actions):
    """The routes of one dashboard over one App: its pages (:mod:`._pages`) and its actions
    (:mod:`._actions`)."""

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
            Route(path, refuse_read_only if self.read_only else fn, methods=["POST"])
            for path, fn in changing
        ]
