"""Job meta: set at enqueue (explicitly or by the app's providers), stored, read back, archived,
and seen by the worker's hooks and the task's context, never passed to the task."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import pytest

from skiplock import App, InvalidPayload, Job, JobContext, Worker, WorkerStats
from skiplock.testing import assert_enqueued

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


def burst(app: App) -> WorkerStats:
    return asyncio.run(asyncio.wait_for(Worker(app, burst=True, poll_interval=0.05).run(), 30))


def stored_meta(db: Any, app: App) -> dict[int, Any]:
    rows = db.execute(f'SELECT id, meta FROM "{app.schema}".jobs ORDER BY id').fetchall()
    return dict(rows)


def test_meta_is_stored_by_every_enqueue_path_and_read_back(app: App, db: Any) -> None:
    @app.task(name="t")
    def t(n: int = 0) -> None: ...

    one = t.with_options(meta={"trace": "a"}).enqueue(n=1).id
    by_name = app.enqueue("t", {"n": 2}, meta={"trace": "b"}).id
    many = [e.id for e in t.with_options(meta={"tag": "bulk"}).enqueue_many([{"n": 3}, {"n": 4}])]
    keyed = app.enqueue("t", {"n": 5}, meta={"trace": "c"}, idempotency_key="k").id
    mixed = app.sync_client.enqueue_many(
        [app.build_job("t", {"n": 6}, t.with_options(meta={"i": 6}).options),
         app.build_job("t", {"n": 7}, t.with_options().options)]
    )  # fmt: skip
    none = t.enqueue(n=8).id
    assert asyncio.run(app.enqueue_async("t", {"n": 9}, meta={"trace": "d"})).id == none + 1

    assert stored_meta(db, app) == {
        one: {"trace": "a"}, by_name: {"trace": "b"}, many[0]: {"tag": "bulk"},
        many[1]: {"tag": "bulk"}, keyed: {"trace": "c"}, mixed[0].id: {"i": 6},
        mixed[1].id: None, none: None, none + 1: {"trace": "d"},
    }  # fmt: skip
    job = app.get_job(one)
    assert job is not None and job.meta == {"trace": "a"} and job.payload == {"n": 1}
    assert [j.meta for j in app.sync_client.list_jobs(limit=2)] == [{"trace": "d"}, None]
    assert assert_enqueued(t, payload={"n": 1}).meta == {"trace": "a"}


def test_bad_meta_is_refused_and_nothing_is_written(app: App, db: Any) -> None:
    @app.task(name="t")
    def t() -> None: ...

    for bad in ({"at": object()}, {"big": "x" * 10_000}, ["not", "a", "mapping"]):
        with pytest.raises(InvalidPayload, match="meta of a job of task 't'"):
            app.enqueue("t", meta=bad)
    assert stored_meta(db, app) == {}


@pytest.mark.parametrize("model", ["lease", "held"])
def test_providers_carry_context_from_the_enqueuer_to_the_task(
    app: App, db: Any, model: str
) -> None:
    @app.enqueue_meta
    def current_request() -> dict[str, str]:
        rid = request_id.get()
        return {"request_id": rid, "source": "web"} if rid else {}

    @app.around_job
    @contextmanager
    def restore_request(job: Job) -> Iterator[None]:
        token = request_id.set((job.meta or {}).get("request_id"))
        try:
            yield
        finally:
            request_id.reset(token)

    seen: list[tuple[Any, ...]] = []

    @app.task(name="sync_task", model=model, pass_context=True)  # type: ignore[arg-type]
    def sync_task(ctx: JobContext, n: int) -> None:
        seen.append((n, request_id.get(), ctx.job.meta))

    @app.task(name="async_task", model=model, pass_context=True)  # type: ignore[arg-type]
    async def async_task(ctx: JobContext, n: int) -> None:
        seen.append((n, request_id.get(), ctx.job.meta))

    token = request_id.set("req-42")
    try:
        sync_task.enqueue(n=1)
        async_task.enqueue_many([{"n": 2}, {"n": 3}])
        async_task.with_options(meta={"source": "cron"}).enqueue(n=4)  # an explicit key wins
    finally:
        request_id.reset(token)
    sync_task.enqueue(n=5)  # no request: the provider adds nothing

    assert burst(app).done == 5
    web = {"request_id": "req-42", "source": "web"}
    assert sorted(seen, key=lambda s: s[0]) == [
        (1, "req-42", web), (2, "req-42", web), (3, "req-42", web),
        (4, "req-42", {"request_id": "req-42", "source": "cron"}), (5, None, None),
    ]  # fmt: skip


def test_archived_jobs_keep_their_meta(pg_dsn: str, schema: str, db: Any) -> None:
    archiving = App(pg_dsn, schema, completion="archive")
    try:

        @archiving.task(name="t")
        def t() -> None: ...

        job_id = t.with_options(meta={"trace": "z"}).enqueue().id
        assert burst(archiving).done == 1
        (meta,) = db.execute(
            f'SELECT meta FROM "{schema}".jobs_archive WHERE id = %s', (job_id,)
        ).fetchone()
        assert meta == {"trace": "z"}
        job = archiving.get_job(job_id)
        assert job is not None and job.meta == {"trace": "z"}
    finally:
        archiving.close()


def test_tracing_instrument_links_job_spans_to_the_request(app: App, db: Any) -> None:
    """skiplock.observability.tracing.instrument with a real OpenTelemetry SDK, to the messaging
    semantic conventions: a PRODUCER span ``publish {queue}`` at enqueue, under the caller's
    span; each attempt's CONSUMER span ``process {queue}`` its child and linked to it, current
    inside the task (sync and async), recording a failure but not a snooze; and the
    conventions' metrics."""
    from opentelemetry import trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from skiplock import Retry
    from skiplock.observability.tracing import instrument

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    tracer = provider.get_tracer("shop")
    instrument(app, tracer_provider=provider, meter_provider=meters)
    instrument(app, tracer_provider=provider, meter_provider=meters)  # a second call adds nothing
    assert (len(app.job_hooks), len(app.meta_providers), len(app.enqueue_hooks)) == (1, 1, 1)

    inside: dict[int, int] = {}  # job id -> the trace id current inside its task
    snoozes: list[int] = []

    @app.task(name="receipt", pass_context=True)
    def receipt(ctx: JobContext) -> None:
        inside[ctx.job.id] = trace.get_current_span().get_span_context().trace_id

    @app.task(name="invoice", max_attempts=1, pass_context=True, queue="billing")
    async def invoice(ctx: JobContext) -> None:
        inside[ctx.job.id] = trace.get_current_span().get_span_context().trace_id
        raise ValueError("no address")

    @app.task(name="later", pass_context=True)
    def later(ctx: JobContext) -> None:
        inside[ctx.job.id] = trace.get_current_span().get_span_context().trace_id
        if not snoozes:
            snoozes.append(ctx.job.id)
            raise Retry(0)

    with tracer.start_as_current_span("POST /orders") as request:
        traced = [receipt.enqueue().id, invoice.enqueue().id]
    batch = [e.id for e in later.enqueue_many([{}, {}])]  # outside any span: a trace of its own

    stats = burst(app)
    assert (stats.done, stats.failed, stats.snoozed) == (3, 1, 1)
    request_context = request.get_span_context()
    finished = exporter.get_finished_spans()
    published = [s for s in finished if s.kind == trace.SpanKind.PRODUCER]
    assert [s.name for s in published] == ["publish default", "publish billing", "publish default"]
    for span in published[:2]:
        assert span.parent is not None and span.parent.span_id == request_context.span_id
    assert published[2].parent is None
    sent = dict(published[1].attributes or {})
    assert sent == {
        "messaging.system": "skiplock",
        "messaging.operation.name": "publish",
        "messaging.operation.type": "send",
        "messaging.destination.name": "billing",
        "skiplock.task": "invoice",
    }
    assert dict(published[2].attributes or {})["messaging.batch.message_count"] == 2

    consumed = [s for s in finished if s.kind == trace.SpanKind.CONSUMER]
    runs: dict[int, list[Any]] = {}
    for s in consumed:
        runs.setdefault(int(s.attributes["messaging.message.id"]), []).append(s)  # type: ignore[arg-type,index]
    assert sorted(runs) == sorted([*traced, *batch])
    producer_of = {traced[0]: published[0], traced[1]: published[1]}
    producer_of.update(dict.fromkeys(batch, published[2]))
    for job_id, spans in runs.items():
        producer = producer_of[job_id].context
        for span in spans:  # the producer span is the parent and the link
            assert span.parent is not None and span.parent.span_id == producer.span_id
            assert [link.context.span_id for link in span.links] == [producer.span_id]
            assert inside[job_id] == span.context.trace_id  # current inside its task
    for job_id in traced:
        assert runs[job_id][0].context.trace_id == request_context.trace_id
    failed = runs[traced[1]][0]
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.name == "process billing"
    attributes = dict(failed.attributes or {})
    assert attributes["messaging.destination.name"] == "billing"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["error.type"] == "ValueError"
    assert (attributes["skiplock.task"], attributes["skiplock.attempt"]) == ("invoice", 1)
    assert [e.name for e in failed.events] == ["exception"]
    snoozed, rerun = runs[snoozes[0]]
    assert snoozed.status.status_code == trace.StatusCode.UNSET
    assert [e.name for e in snoozed.events] == ["snoozed"]
    assert "error.type" not in dict(snoozed.attributes or {})
    assert rerun.status.status_code == trace.StatusCode.UNSET
    assert runs[traced[0]][0].context.trace_id != runs[batch[0]][0].context.trace_id

    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
    assert sum(p.value for p in points["messaging.client.sent.messages"]) == 4
    assert sum(p.value for p in points["messaging.client.consumed.messages"]) == 5
    durations = {
        (p.attributes["messaging.destination.name"], p.attributes.get("error.type")): p.count
        for p in points["messaging.process.duration"]
    }
    assert durations == {("default", None): 4, ("billing", "ValueError"): 1}
    assert sum(p.count for p in points["messaging.client.operation.duration"]) == 3
