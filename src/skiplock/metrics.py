"""Prometheus metrics of a worker process: ``skiplock worker --metrics-port PORT``.

Needs the ``metrics`` extra (``pip install 'skiplock[metrics]'``, which brings
``prometheus-client``).  The metrics come from the worker's job events (see
:mod:`skiplock.events`), so they cost nothing when not asked for:

- ``skiplock_jobs_started_total{queue, task}``: jobs this process started (claimed into a slot).
- ``skiplock_jobs_finished_total{queue, task, outcome}``: outcomes recorded, by kind: ``done``,
  ``retry``, ``failed``, ``snooze``, ``cancelled``, ``release`` (given back at shutdown) and
  ``lost`` (the claim had been taken away, so the outcome did not count).  Jobs claimed ahead
  and given back unstarted count here too, not as started.
- ``skiplock_job_duration_seconds{queue, task}``: how long each started job ran until its
  outcome was recorded (histogram).
- ``skiplock_jobs_running{queue}``: jobs started and not finished yet.
- ``skiplock_worker_info{worker_id, version}``: 1, to tell processes apart.

The ``task`` label is one of the app's registered task names, or ``unknown`` for any other (a
row's task name is whatever its producer wrote: one label value per name would grow the scrape
without bound).  The queue label is one of the worker's own queues.

Each process serves its own: with ``--processes N`` process *k* listens on PORT + *k*, on
127.0.0.1 unless ``--metrics-addr`` says otherwise.  Queue
depth is a property of the table, not of a worker: ``skiplock status --json`` gives it.

An event only adds to plain dictionaries (about 1 us per job); the Prometheus metrics are
built from them when scraped (a custom collector), not kept up to date per job: updating
prometheus-client's own counters and histogram cost ~8 us per job, a third of what a worker
spends on a short job, and a 50,000-job no-op drain ran 29% slower with them (now ~15%, most
of it making the two events per job, which the worker skips when nothing listens).  The
dictionaries are copied (atomic under the GIL) before they are read on the HTTP server's
thread.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Iterator
from itertools import accumulate
from typing import TYPE_CHECKING

from .errors import ConfigurationError
from .events import JobEvent

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

# The task label of jobs whose task the worker does not know.
UNKNOWN_TASK = "unknown"
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class WorkerMetrics:
    """Prometheus metrics fed by a worker's events: pass :meth:`on_event` as
    ``Worker(on_event=...)`` and serve :attr:`registry` (its own unless one is given)."""

    def __init__(
        self,
        worker_id: str,
        version: str,
        registry: CollectorRegistry | None = None,
        known_tasks: Collection[str] | None = None,
    ) -> None:
        """``known_tasks``: the task names that get a label value of their own; any other is
        counted as :data:`UNKNOWN_TASK` (None: every name is kept, for a caller whose names
        are bounded)."""
        try:
            from prometheus_client import CollectorRegistry
        except ImportError:
            raise ConfigurationError(
                "metrics need prometheus-client: pip install 'skiplock[metrics]'"
            ) from None
        self.worker_id = worker_id
        self.known_tasks = frozenset(known_tasks) if known_tasks is not None else None
        self.version = version
        self._started: dict[tuple[str, str], int] = {}  # (queue, task) -> jobs
        self._finished: dict[tuple[str, str, str], int] = {}  # (queue, task, outcome) -> jobs
        # (queue, task) -> [sum of durations, count per bucket of DURATION_BUCKETS..., +Inf]
        self._durations: dict[tuple[str, str], list[float]] = {}
        self._in_flight: dict[int, str] = {}  # id -> queue of jobs started, not finished
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(self)  # a collector: prometheus-client calls collect()

    def on_event(self, event: JobEvent) -> None:
        job = event.job
        task = job.task
        if self.known_tasks is not None and task not in self.known_tasks:
            task = UNKNOWN_TASK
        if event.kind == "started":
            key = (job.queue, task)
            self._started[key] = self._started.get(key, 0) + 1
            self._in_flight[job.id] = job.queue
            return
        outcome = (job.queue, task, event.outcome or "done")
        self._finished[outcome] = self._finished.get(outcome, 0) + 1
        if self._in_flight.pop(job.id, None) is None:
            return  # claimed ahead and given back (shutdown, cancel) without starting
        if event.duration is not None:
            key = (job.queue, task)
            histogram = self._durations.get(key)
            if histogram is None:
                histogram = self._durations[key] = [0.0] * (len(DURATION_BUCKETS) + 2)
            histogram[0] += event.duration
            histogram[1 + bisect_left(DURATION_BUCKETS, event.duration)] += 1

    def collect(self) -> Iterator[Metric]:
        """The metrics as of now (prometheus-client calls this on each scrape)."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        started = CounterMetricFamily(
            "skiplock_jobs_started", "Jobs this worker process started.", labels=["queue", "task"]
        )
        for (queue, task), count in self._started.copy().items():
            started.add_metric([queue, task], count)
        yield started
        finished = CounterMetricFamily(
            "skiplock_jobs_finished",
            "Job outcomes this worker process recorded, by outcome.",
            labels=["queue", "task", "outcome"],
        )
        for labels, count in self._finished.copy().items():
            finished.add_metric(list(labels), count)
        yield finished
        durations = HistogramMetricFamily(
            "skiplock_job_duration_seconds",
            "How long started jobs ran until their outcome was recorded, in seconds.",
            labels=["queue", "task"],
        )
        bounds = [repr(float(b)) for b in DURATION_BUCKETS] + ["+Inf"]
        for (queue, task), histogram in self._durations.copy().items():
            total, *counts = list(histogram)
            buckets = list(zip(bounds, accumulate(counts), strict=True))
            durations.add_metric([queue, task], buckets, sum_value=total)
        yield durations
        running = GaugeMetricFamily(
            "skiplock_jobs_running",
            "Jobs this worker process started and has not finished.",
            labels=["queue"],
        )
        in_flight = Counter(self._in_flight.copy().values())
        for queue in {queue for queue, _ in self._started.copy()}:  # 0 once all finished
            running.add_metric([queue], in_flight[queue])
        yield running
        info = GaugeMetricFamily(
            "skiplock_worker_info",
            "This worker process (always 1).",
            labels=["worker_id", "version"],
        )
        info.add_metric([self.worker_id, self.version], 1)
        yield info

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` over HTTP on a daemon thread (prometheus-client's server), on
        this host only unless ``addr`` says otherwise."""
        from prometheus_client import start_http_server

        start_http_server(port, addr, registry=self.registry)
