"""OpenTelemetry tracing and metrics of an app's jobs, to the messaging semantic conventions:
``instrument(app)`` (``pip install 'skiplock[otel]'``).

Three hooks, nothing else:

- an :meth:`App.around_enqueue` hook makes a ``PRODUCER`` span, ``publish {queue}``, around
  each enqueue of a task's jobs (``messaging.operation.type`` ``send``; a batch gives
  ``messaging.batch.message_count``);
- an :meth:`App.enqueue_meta` provider puts the current trace context (W3C ``traceparent``,
  through the globally configured propagator) into each job's meta: the producer span's, or
  the caller's where no producer span is open (a job enqueued in a mixed batch, a periodic
  job);
- an :meth:`App.around_job` hook runs each attempt in a ``CONSUMER`` span, ``process
  {queue}``, whose parent is that context and which links to it, as the conventions ask.  So a
  job's span sits under the span that enqueued it (a web request), however long the job waited
  and on whichever host it ran, and is current inside the task: spans the task starts nest
  under it.  A failed attempt's span records the exception, status ERROR and ``error.type``;
  a snooze (``raise Retry``) is not an error: the span gets an event ``snoozed``.

Metrics (the conventions' names and units, through the global meter provider unless one is
given): ``messaging.client.sent.messages`` and ``messaging.client.operation.duration`` at
enqueue, ``messaging.client.consumed.messages`` and ``messaging.process.duration`` per attempt.
They are in addition to the Prometheus metrics of ``--metrics-port``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Span, Status, StatusCode

from skiplock._version import __version__
from skiplock.app import App
from skiplock.errors import Retry
from skiplock.job import Job

INSTRUMENTED = "_skiplock_tracing"  # set on an app once instrument() has run on it
SYSTEM = "skiplock"  # messaging.system: not one of the conventions' well-known values


def _error_type(exc: BaseException) -> str:
    """``error.type``: the exception's fully qualified class name, as the conventions advise."""
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def instrument(
    app: App,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> None:
    """Trace ``app``'s jobs from enqueue to run and measure them (see the module doc); a second
    call on the same app does nothing.  ``tracer_provider``, ``meter_provider``: the global
    ones when None."""
    if getattr(app, INSTRUMENTED, False):
        return
    tracer = trace.get_tracer("skiplock", __version__, tracer_provider=tracer_provider)
    meter = metrics.get_meter("skiplock", __version__, meter_provider=meter_provider)
    sent = meter.create_counter(
        "messaging.client.sent.messages", unit="{message}", description="Jobs enqueued."
    )
    send_duration = meter.create_histogram(
        "messaging.client.operation.duration", unit="s", description="Duration of an enqueue."
    )
    consumed = meter.create_counter(
        "messaging.client.consumed.messages",
        unit="{message}",
        description="Jobs a worker started (each attempt).",
    )
    process_duration = meter.create_histogram(
        "messaging.process.duration", unit="s", description="Duration of a job's attempt."
    )

    @app.around_enqueue
    @contextmanager
    def publish_span(task: str, queue: str, count: int) -> Iterator[Span]:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "publish",
            "messaging.operation.type": "send",
            "messaging.destination.name": queue,
        }
        started = time.perf_counter()
        error: str | None = None
        span_attributes = {**attributes, "skiplock.task": task}
        if count != 1:
            span_attributes["messaging.batch.message_count"] = count
        with tracer.start_as_current_span(
            f"publish {queue}", kind=trace.SpanKind.PRODUCER, attributes=span_attributes
        ) as span:
            try:
                yield span
            except BaseException as exc:
                error = _error_type(exc)
                span.set_attribute("error.type", error)
                raise
            finally:
                measured = {**attributes, "error.type": error} if error else attributes
                sent.add(count, measured)
                send_duration.record(time.perf_counter() - started, measured)

    @app.enqueue_meta
    def trace_context() -> dict[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier

    @app.around_job
    @contextmanager
    def job_span(job: Job) -> Iterator[Span]:
        parent = propagate.extract(job.meta or {})
        producer = trace.get_current_span(parent).get_span_context()
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": job.queue,
        }
        consumed.add(1, attributes)
        started = time.perf_counter()
        error: str | None = None
        with tracer.start_as_current_span(
            f"process {job.queue}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            links=[trace.Link(producer)] if producer.is_valid else None,
            attributes={
                **attributes,
                "messaging.message.id": str(job.id),
                "skiplock.task": job.task,
                "skiplock.attempt": job.attempts,
                "skiplock.max_attempts": job.max_attempts,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except Retry as snooze:  # asked to run again later: not a failure
                span.add_event("snoozed", {"skiplock.retry.delay": float(snooze.delay)})
                raise
            except BaseException as exc:
                error = _error_type(exc)
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                span.set_attribute("error.type", error)
                raise
            finally:
                measured = {**attributes, "error.type": error} if error else attributes
                process_duration.record(time.perf_counter() - started, measured)

    setattr(app, INSTRUMENTED, True)
