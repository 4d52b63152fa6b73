"""OpenTelemetry tracing of an app's jobs: ``instrument(app)`` (``pip install 'skiplock[otel]'``).

Two hooks, nothing else: an :meth:`App.enqueue_meta` provider puts the caller's trace context
(W3C ``traceparent``, through the globally configured propagator) into each job's meta, and an
:meth:`App.around_job` hook runs each task in a ``CONSUMER`` span whose parent is that
context.  So a job's span is a child of the span that enqueued it (a web request), however
long the job waited and on whichever host it ran, and is current inside the task: spans the
task starts (database calls, HTTP) nest under it.  A failed attempt's span records the
exception; each attempt is a span of its own.  No span is made at enqueue itself.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import propagate, trace

from skiplock._version import __version__
from skiplock.app import App
from skiplock.job import Job

INSTRUMENTED = "_skiplock_tracing"  # set on an app once instrument() has run on it


def instrument(app: App, *, tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace ``app``'s jobs from enqueue to run (see the module doc); a second call on the
    same app does nothing.  ``tracer_provider``: the global one when None."""
    if getattr(app, INSTRUMENTED, False):
        return
    tracer = trace.get_tracer("skiplock", __version__, tracer_provider=tracer_provider)

    @app.enqueue_meta
    def trace_context() -> dict[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier

    @app.around_job
    def job_span(job: Job) -> Any:
        return tracer.start_as_current_span(
            f"{job.task} process",
            context=propagate.extract(job.meta or {}),
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "skiplock",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "skiplock.task": job.task,
                "skiplock.attempt": job.attempts,
                "skiplock.max_attempts": job.max_attempts,
            },
        )

    setattr(app, INSTRUMENTED, True)
