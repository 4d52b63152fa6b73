"""The dashboard's reading of a request: its query, route and form parameters, checked (400 for
a value no job, queue or status can have), and the redirect back to a page after an action."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from skiplock._db.bounds import check_queue_name, check_task_name
from skiplock._db.job_search import payload_filter
from skiplock.bulk import JobFilter
from skiplock.errors import InvalidName
from skiplock.job import JobStatus

BIGINT_END = 2**63  # ids and counts beyond a bigint are refused before any statement


async def refuse_read_only(request: Request) -> Response:
    raise HTTPException(403, "this dashboard is read-only: it changes nothing")


def back(request: Request, path: str, **params: Any) -> Response:
    """303 to a page of the dashboard, with what happened in its address."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    query = f"?{query}" if query else ""
    return RedirectResponse(f"{request.scope.get('root_path', '')}{path}{query}", 303)


def int_param(request: Request, name: str) -> int | None:
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


def path_job_id(request: Request) -> int:
    """The job id of the route; an id no bigint holds is a job that does not exist."""
    job_id: int = request.path_params["job_id"]
    if job_id >= BIGINT_END:
        raise HTTPException(404, f"no job {job_id}")
    return job_id


def path_queue(request: Request) -> str:
    """The queue named in the route; 400 for a name no queue can have."""
    queue = queue_param(request.path_params["queue"])
    if queue is None:
        raise HTTPException(400, "invalid queue name")
    return queue


def queue_param(value: str | None) -> str | None:
    try:
        return check_queue_name(value) if value else None
    except InvalidName:
        return None


UNSTARTED = ("waiting", "scheduled", "pending")
FINISHED = ("done", "failed", "cancelled")


def bulk_statuses(action: str | None, status: str | None) -> list[str]:
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


def bulk_form(form: Any) -> tuple[JobFilter, str | None]:
    """The filter (queue, task) and status a bulk action's form carries, checked."""
    queue, task, status = (str(form.get(k) or "") or None for k in ("queue", "task", "status"))
    try:
        return JobFilter(queue=queue, task=task), status
    except InvalidName as exc:
        raise HTTPException(400, str(exc)) from None


def payload_param(request: Request) -> str | None:
    """The payload filter (``key`` = ``value``) as JSON text, None without a key; 400 if bad."""
    key = request.query_params.get("key") or ""
    if not key:
        return None
    try:
        return payload_filter(key, request.query_params.get("value") or "")
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


def list_filters(request: Request) -> dict[str, Any]:
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
