"""Prometheus metrics of worker processes: ``skiplock worker --metrics-port PORT``.

Needs the ``metrics`` extra (``pip install 'skiplock[metrics]'``, which brings
``prometheus-client``).  The metrics come from the worker's job events (see
:mod:`skiplock.events`), so they cost nothing when not asked for:

- ``skiplock_jobs_started_total{queue, task}``: jobs started (claimed into a slot).
- ``skiplock_jobs_finished_total{queue, task, outcome}``: outcomes recorded, by kind: ``done``,
  ``retry``, ``failed``, ``snooze``, ``cancelled``, ``release`` (given back at shutdown) and
  ``lost`` (the claim had been taken away, so the outcome did not count).  Jobs claimed ahead
  and given back unstarted count here too, not as started.
- ``skiplock_job_wait_seconds{queue, task}``: queue wait, from the time a job was due (its
  ``run_at``) to its claim, both on the database's clock (histogram).
- ``skiplock_job_duration_seconds{queue, task}``: how long each started job ran until its
  outcome was recorded (histogram).
- ``skiplock_jobs_running{queue}``: jobs started and not finished yet.
- ``skiplock_worker_info{worker_id, version}``: 1 per worker process, to tell them apart.

The ``task`` label is one of the app's registered task names, or ``unknown`` for any other (a
row's task name is whatever its producer wrote: one label value per name would grow the scrape
without bound).  The queue label is one of the worker's own queues.  The series of the
registered tasks on the served queues exist from the start, at 0.

With ``--processes N`` the supervisor serves PORT for all its processes: each child writes its
totals to a file of its own in a private directory every :data:`FLUSH_EVERY` seconds and when
it exits, and a scrape adds up the files (:class:`AggregateCollector`).  The totals of a child
that exited (recycled, crashed) are kept once, so counters never go back nor count twice; a
child killed outright loses what it did since its last write.

Queue depth is a property of the table, not of a worker: ``skiplock metrics`` (see
:mod:`skiplock.observability._exporter`) exports it once per cluster.

An event only adds to plain dictionaries; the Prometheus metrics are built from them when
scraped (a custom collector), not kept up to date per job, which would cost a good part of
what a worker spends on a short job (docs/design.md, "Worker metrics built at scrape
time").  The dictionaries are copied (atomic under the GIL) before they are read
on another thread.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skiplock.errors import ConfigurationError
from skiplock.events import JobEvent

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("skiplock.observability.metrics")

# The task label of jobs whose task the worker does not know.
UNKNOWN_TASK = "unknown"
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
OUTCOMES = ("done", "retry", "failed", "snooze", "cancelled", "release", "lost")
FLUSH_EVERY = 1.0  # seconds between a supervised worker's writes of its totals

Histograms = dict[tuple[str, str], list[float]]  # (queue, task) -> [sum, count per bucket..., +Inf]


def require_client() -> None:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "metrics need prometheus-client: pip install 'skiplock[metrics]'"
        ) from None


def _observe(
    histograms: Histograms, key: tuple[str, str], bounds: tuple[float, ...], v: float
) -> None:
    histogram = histograms.get(key)
    if histogram is None:
        histogram = histograms[key] = [0.0] * (len(bounds) + 2)
    histogram[0] += v
    histogram[1 + bisect_left(bounds, v)] += 1


@dataclass
class Totals:
    """What one or more worker processes counted: the state behind every metric."""

    started: dict[tuple[str, str], int] = field(default_factory=dict)
    finished: dict[tuple[str, str, str], int] = field(default_factory=dict)
    durations: Histograms = field(default_factory=dict)
    waits: Histograms = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)  # queue -> jobs running
    workers: list[str] = field(default_factory=list)  # the live processes' worker ids

    def add(self, other: Totals, *, live: bool = True) -> None:
        """Add ``other``'s counts; its running jobs and worker only if it is ``live``."""
        for key, n in other.started.items():
            self.started[key] = self.started.get(key, 0) + n
        for outcome, n in other.finished.items():
            self.finished[outcome] = self.finished.get(outcome, 0) + n
        for mine, theirs in ((self.durations, other.durations), (self.waits, other.waits)):
            for key, histogram in theirs.items():
                have = mine.setdefault(key, [0.0] * len(histogram))
                mine[key] = [a + b for a, b in zip(have, histogram, strict=True)]
        for queue, n in other.running.items():
            self.running[queue] = self.running.get(queue, 0) + (n if live else 0)
        if live:
            self.workers.extend(other.workers)

    def to_json(self) -> dict[str, Any]:
        return {
            "started": [[*k, n] for k, n in self.started.items()],
            "finished": [[*k, n] for k, n in self.finished.items()],
            "durations": [[*k, h] for k, h in self.durations.items()],
            "waits": [[*k, h] for k, h in self.waits.items()],
            "running": self.running,
            "workers": self.workers,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Totals:
        return cls(
            started={(q, t): n for q, t, n in data["started"]},
            finished={(q, t, o): n for q, t, o, n in data["finished"]},
            durations={(q, t): h for q, t, h in data["durations"]},
            waits={(q, t): h for q, t, h in data["waits"]},
            running=dict(data["running"]),
            workers=list(data["workers"]),
        )


def _histogram(name: str, doc: str, bounds: tuple[float, ...], table: Histograms) -> Metric:
    from prometheus_client.core import HistogramMetricFamily

    family = HistogramMetricFamily(name, doc, labels=["queue", "task"])
    edges = [repr(float(b)) for b in bounds] + ["+Inf"]
    for (queue, task), histogram in table.items():
        total, *counts = histogram
        buckets = list(zip(edges, accumulate(counts), strict=True))
        family.add_metric([queue, task], buckets, sum_value=total)
    return family


def families(totals: Totals, version: str) -> Iterator[Metric]:
    """The Prometheus metric families of ``totals``."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    started = CounterMetricFamily(
        "skiplock_jobs_started", "Jobs started by the worker processes.", labels=["queue", "task"]
    )
    for (queue, task), count in totals.started.items():
        started.add_metric([queue, task], count)
    yield started
    finished = CounterMetricFamily(
        "skiplock_jobs_finished",
        "Job outcomes the worker processes recorded, by outcome.",
        labels=["queue", "task", "outcome"],
    )
    for labels, count in totals.finished.items():
        finished.add_metric(list(labels), count)
    yield finished
    yield _histogram(
        "skiplock_job_wait_seconds",
        "Queue wait: from the time a job was due to its start, in seconds.",
        WAIT_BUCKETS,
        totals.waits,
    )
    yield _histogram(
        "skiplock_job_duration_seconds",
        "How long started jobs ran until their outcome was recorded, in seconds.",
        DURATION_BUCKETS,
        totals.durations,
    )
    running = GaugeMetricFamily(
        "skiplock_jobs_running",
        "Jobs the worker processes started and have not finished.",
        labels=["queue"],
    )
    for queue, count in sorted(totals.running.items()):
        running.add_metric([queue], count)
    yield running
    info = GaugeMetricFamily(
        "skiplock_worker_info", "A live worker process (always 1).", labels=["worker_id", "version"]
    )
    for worker_id in totals.workers:
        info.add_metric([worker_id, version], 1)
    yield info


class WorkerMetrics:
    """Prometheus metrics fed by a worker's events: pass :meth:`on_event` as
    ``Worker(on_event=...)`` and serve :attr:`registry` (its own unless one is given)."""

    def __init__(
        self,
        worker_id: str,
        version: str,
        registry: CollectorRegistry | None = None,
        known_tasks: Collection[str] | None = None,
        series: Iterable[tuple[str, str]] = (),
    ) -> None:
        """``known_tasks``: the task names that get a label value of their own; any other is
        counted as :data:`UNKNOWN_TASK` (None: every name is kept, for a caller whose names
        are bounded).  ``series``: the (queue, task) pairs whose series start at 0."""
        require_client()
        from prometheus_client import CollectorRegistry

        self.worker_id = worker_id
        self.known_tasks = frozenset(known_tasks) if known_tasks is not None else None
        self.version = version
        self._started: dict[tuple[str, str], int] = {}  # (queue, task) -> jobs
        self._finished: dict[tuple[str, str, str], int] = {}  # (queue, task, outcome) -> jobs
        self._durations: Histograms = {}  # of DURATION_BUCKETS
        self._waits: Histograms = {}  # of WAIT_BUCKETS
        self._in_flight: dict[int, str] = {}  # id -> queue of jobs started, not finished
        for queue, task in series:
            self._started[queue, task] = 0
            for outcome in OUTCOMES:
                self._finished[queue, task, outcome] = 0
            self._durations[queue, task] = [0.0] * (len(DURATION_BUCKETS) + 2)
            self._waits[queue, task] = [0.0] * (len(WAIT_BUCKETS) + 2)
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
            if job.locked_at is not None:  # the claim's time and run_at: the database's clock
                wait = (job.locked_at - job.run_at).total_seconds()
                _observe(self._waits, key, WAIT_BUCKETS, wait if wait > 0.0 else 0.0)
            return
        outcome = (job.queue, task, event.outcome or "done")
        self._finished[outcome] = self._finished.get(outcome, 0) + 1
        if self._in_flight.pop(job.id, None) is None:
            return  # claimed ahead and given back (shutdown, cancel) without starting
        if event.duration is not None:
            _observe(self._durations, (job.queue, task), DURATION_BUCKETS, event.duration)

    def snapshot(self) -> Totals:
        """The counts as of now (callable from any thread)."""
        running = dict.fromkeys({queue for queue, _ in self._started.copy()}, 0)
        for queue in self._in_flight.copy().values():
            running[queue] = running.get(queue, 0) + 1
        return Totals(
            started=self._started.copy(),
            finished=self._finished.copy(),
            durations={k: list(h) for k, h in self._durations.copy().items()},
            waits={k: list(h) for k, h in self._waits.copy().items()},
            running=running,
            workers=[self.worker_id],
        )

    def collect(self) -> Iterator[Metric]:
        """The metrics as of now (prometheus-client calls this on each scrape)."""
        return families(self.snapshot(), self.version)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` over HTTP on a daemon thread (prometheus-client's server), on
        this host only unless ``addr`` says otherwise."""
        from prometheus_client import start_http_server

        start_http_server(port, addr, registry=self.registry)


class SnapshotWriter:
    """A supervised worker's totals, written to ``directory`` every :data:`FLUSH_EVERY`
    seconds and at :meth:`close`, for the supervisor to serve (:class:`AggregateCollector`)."""

    def __init__(self, metrics: WorkerMetrics, directory: str | Path) -> None:
        self.metrics = metrics
        name = re.sub(r"[^\w.-]", "_", metrics.worker_id)
        self.path = Path(directory) / f"{name}.json"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="skiplock-metrics", daemon=True)

    def start(self) -> None:
        self.write()
        self._thread.start()

    def write(self) -> None:
        data = {"pid": os.getpid(), **self.metrics.snapshot().to_json()}
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data))
        temporary.replace(self.path)  # atomic: a reader never sees half a file

    def _loop(self) -> None:
        while not self._stop.wait(FLUSH_EVERY):
            try:
                self.write()
            except OSError as exc:
                log.warning("could not write the worker's metrics to %s: %s", self.path, exc)

    def close(self) -> None:
        """Stop the periodic writes and write the final totals."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.write()


class AggregateCollector:
    """The supervisor's metrics: the sum of its children's totals in ``directory``.  A file
    whose process is not among ``live_pids()`` is final: it is added to the retired totals
    once and removed."""

    def __init__(self, directory: str | Path, live_pids: Callable[[], set[int]], version: str):
        require_client()
        self.directory = Path(directory)
        self.live_pids = live_pids
        self.version = version
        self._retired = Totals()
        self._lock = threading.Lock()  # two scrapes at once must not retire a file twice

    def totals(self) -> Totals:
        with self._lock:
            live = self.live_pids()
            totals = Totals()
            totals.add(self._retired)
            for path in sorted(self.directory.glob("*.json")):
                try:
                    data = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue  # gone meanwhile
                snapshot = Totals.from_json(data)
                if data["pid"] in live:
                    totals.add(snapshot)
                else:
                    self._retired.add(snapshot, live=False)
                    totals.add(snapshot, live=False)
                    path.unlink()
            return totals

    def collect(self) -> Iterator[Metric]:
        return families(self.totals(), self.version)
