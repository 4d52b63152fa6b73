"""``skiplock demo``: the story of docs/demo.md, live, on a throwaway schema of its own.

Part 1 (:mod:`skiplock._demo.patterns`) runs the three dequeue patterns with 1, 2, 4 ...
workers; part 2 (:mod:`skiplock._demo.at_work`) runs skiplock itself with failing tasks and
killed workers.  The schema ``skiplock_demo_<hex>`` is dropped at the end, also after an
error or Ctrl-C, unless ``keep`` is set.  With ``as_json`` the only thing on stdout is one
JSON document; the tables go to stderr.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import logging
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from skiplock._cli.common import console as cli_console
from skiplock._demo.app import CRASH_QUEUES, FLEET_QUEUES, build_app
from skiplock._demo.at_work import DemoFailed, run_at_work
from skiplock._demo.patterns import (
    LABELS,
    PATTERNS,
    SHORT_LABELS,
    WORK_SECONDS,
    PatternBench,
    PatternResult,
    worker_counts,
)
from skiplock._demo.report import AtWorkResult, AtWorkState
from skiplock.app import App
from skiplock.errors import ConfigurationError, SkiplockError

DEFAULT_JOBS, QUICK_JOBS = 2000, 200
PATTERN_JOBS, QUICK_PATTERN_JOBS = 400, 60
PATTERN_LEGEND = """[dim]\
naive        SELECT id ... LIMIT 1, then UPDATE ... WHERE id = $1
FOR UPDATE   UPDATE ... WHERE id = (SELECT ... LIMIT 1 FOR UPDATE)
SKIP LOCKED  UPDATE ... WHERE id = (SELECT ... LIMIT 1 FOR UPDATE SKIP LOCKED)[/]"""
STATUSES = ("scheduled", "pending", "running", "done", "failed")


def run_demo(
    dsn: str | None,
    *,
    jobs: int | None = None,
    workers: int = 8,
    quick: bool = False,
    as_json: bool = False,
    keep: bool = False,
    plot: str | None = None,
) -> dict[str, Any]:
    """Run both parts; returns (and, with ``as_json``, prints) the results."""
    if plot and importlib.util.find_spec("matplotlib") is None:
        raise ConfigurationError(
            "--plot needs matplotlib, which is not installed: pip install 'skiplock[plot]'"
        )
    console = cli_console(stderr=as_json)
    schema = f"skiplock_demo_{secrets.token_hex(4)}"
    app = build_app(dsn, schema)  # without a DSN: the environment's, else the embedded server
    jobs = jobs or (QUICK_JOBS if quick else DEFAULT_JOBS)
    started = time.monotonic()
    migrated = False
    with _quiet_logs():
        try:
            app.migrate()
            migrated = True
            console.print(
                f"[bold]skiplock demo[/] on schema [cyan]{schema}[/] "
                f"({'kept' if keep else 'dropped'} at the end)\n"
            )
            per_run = QUICK_PATTERN_JOBS if quick else PATTERN_JOBS
            patterns = _part_one(console, app, workers, per_run)
            at_work = _part_two(console, app, jobs, workers, timeout=60 if quick else 120)
        except BaseException:
            if migrated and not keep:
                _drop_after_error(console, app)
            raise
        else:
            if not keep:
                app.sync_client.drop_schema()
        finally:
            app.close()
    results = {
        "schema": schema,
        "kept": keep,
        "patterns": [r.as_dict() for r in patterns],
        "at_work": at_work.as_dict(),
        "seconds": round(time.monotonic() - started, 2),
    }
    if plot:
        write_plot(plot, patterns)
        console.print(f"wrote the chart to [cyan]{plot}[/]")
    if as_json:
        print(json.dumps(results, indent=2))
    problems = at_work.problems() + [
        f"{r.pattern} with {r.workers} workers claimed {r.duplicates} jobs twice"
        for r in patterns
        if r.pattern != "naive" and r.duplicates
    ]
    if problems:
        raise DemoFailed("the demo found a problem: " + "; ".join(problems))
    return results


def _drop_after_error(console: Console, app: App) -> None:
    """Drop the schema without hiding the error that ended the demo."""
    try:
        app.sync_client.drop_schema()
    except (SkiplockError, psycopg.Error) as exc:
        console.print(
            f"[red]could not drop the demo's schema {app.schema}[/] ({exc}); "
            f"drop it with: DROP SCHEMA {app.schema} CASCADE"
        )


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """The workers' log lines would tear the live table; the demo tells its own story."""
    loggers = [logging.getLogger(name) for name in ("skiplock", "psycopg")]
    saved = [(lg.propagate, lg.handlers[:]) for lg in loggers]
    for logger in loggers:
        logger.propagate = False
        logger.handlers = [logging.NullHandler()]
    try:
        yield
    finally:
        for logger, (propagate, handlers) in zip(loggers, saved, strict=True):
            logger.propagate, logger.handlers = propagate, handlers


# -- part 1 ------------------------------------------------------------------------------


def _part_one(console: Console, app: App, workers: int, per_run: int) -> list[PatternResult]:
    console.rule("[bold]1. Three ways to take the next job")
    console.print(
        f"Each run: {per_run} jobs, N workers each on its own connection, "
        f"{WORK_SECONDS * 1000:g} ms of work per job while holding it.\n" + PATTERN_LEGEND
    )
    counts = worker_counts(workers)
    runs = [(p, w) for p in PATTERNS for w in counts]
    results: list[PatternResult] = []
    columns = (TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with (
        PatternBench(app.dsn, app.queries, max(counts)) as bench,
        Progress(*columns, console=console, transient=True) as progress,
    ):
        overall = progress.add_task("warming up", total=len(runs) * per_run)
        bench.warm_up()
        for i, (pattern, n) in enumerate(runs):
            progress.update(overall, description=f"{LABELS[pattern]} x {n}")
            base = i * per_run

            def advance(claims: int, base: int = base) -> None:
                progress.update(overall, completed=base + min(claims, per_run))

            results.append(bench.run(pattern, n, per_run, advance))
    console.print(pattern_table(results))
    console.print()
    console.print(_verdict(results))
    return results


def pattern_table(results: list[PatternResult]) -> Table:
    table = Table(
        title="1. claims per second, duplicate claims and lock waits",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    for column in ("pattern", "workers", "claims/s", "speed-up", "duplicates", "lock wait",
                   "claim ms"):  # fmt: skip
        table.add_column(column, justify="left" if column == "pattern" else "right", no_wrap=True)
    for pattern in PATTERNS:
        rows = [r for r in results if r.pattern == pattern]
        first = rows[0].claims_per_s if rows else 0.0
        for r in rows:
            table.add_row(
                SHORT_LABELS[pattern] if r is rows[0] else "",
                str(r.workers),
                f"{r.claims_per_s:.0f}",
                f"x{r.claims_per_s / first:.1f}" if first else "-",
                f"[red]{r.duplicates}[/]" if r.duplicates else "0",
                f"[yellow]{r.wait_seconds:.2f}s[/]" if r.wait_seconds >= 0.005 else "0",
                f"{r.claim_ms:.2f}",
            )
        table.add_section()
    return table


def _verdict(results: list[PatternResult]) -> Text:
    def last(pattern: str) -> PatternResult:
        return [r for r in results if r.pattern == pattern][-1]

    def speedup(pattern: str) -> float:
        rows = [r for r in results if r.pattern == pattern]
        return rows[-1].claims_per_s / rows[0].claims_per_s if rows[0].claims_per_s else 0.0

    naive, wait, skip = last("naive"), last("for_update"), last("skip_locked")
    return Text.from_markup(
        f"- naive: with {naive.workers} workers, {naive.duplicates} claims were of a job another "
        "worker had already taken: both workers ran it.\n"
        f"- FOR UPDATE: no duplicates, but {wait.workers} workers spent {wait.wait_seconds:.1f}s "
        f"waiting for the head row: x{speedup('for_update'):.1f} the throughput of one worker.\n"
        f"- SKIP LOCKED: no duplicates, {skip.wait_seconds:.2f}s waiting, "
        f"x{speedup('skip_locked'):.1f} the throughput of one worker.\n"
        "[dim]lock wait: worker-seconds blocked on a row lock (sampled from pg_stat_activity); "
        "claim: mean time of the claim statement(s).[/]\n"
    )


def write_plot(path: str, results: list[PatternResult]) -> None:
    """Claims per second against workers, one line per pattern (needs matplotlib)."""
    figure: Any = importlib.import_module("matplotlib.figure").Figure(figsize=(7, 4.5), dpi=120)
    axes = figure.subplots()
    for pattern in PATTERNS:
        rows = [r for r in results if r.pattern == pattern]
        label = LABELS[pattern] + (" (duplicates included)" if pattern == "naive" else "")
        axes.plot([r.workers for r in rows], [r.claims_per_s for r in rows], "o-", label=label)
    counts = sorted({r.workers for r in results})
    axes.set_xscale("log", base=2)
    axes.set_xticks(counts, [str(n) for n in counts])
    axes.set_xlabel("workers")
    axes.set_ylabel("claims per second")
    axes.set_ylim(bottom=0)
    axes.set_title("skiplock demo: dequeue patterns")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)


# -- part 2 ------------------------------------------------------------------------------


def _part_two(console: Console, app: App, jobs: int, workers: int, timeout: float) -> AtWorkResult:
    console.rule("[bold]2. skiplock at work")
    with Live(console=console, refresh_per_second=10) as live:

        def tick(state: AtWorkState) -> None:
            live.update(live_view(state))

        result = asyncio.run(
            run_at_work(app, jobs=jobs, workers=workers, on_tick=tick, timeout=timeout)
        )
    console.print()
    console.print(summary_view(result))
    return result


def live_view(state: AtWorkState) -> Group:
    table = Table(
        title=f"{state.enqueued} jobs, {state.workers} workers + a standby, "
        f"{time.monotonic() - state.started:.1f}s",
        title_justify="left",
    )
    table.add_column("queue")
    for status in STATUSES:
        table.add_column(status, justify="right")
    totals = dict.fromkeys(STATUSES, 0)
    for queue in [*FLEET_QUEUES, *CRASH_QUEUES]:
        counts = state.counts.get(queue, {})
        table.add_row(queue, *(str(counts.get(s, 0)) for s in STATUSES))
        for s in STATUSES:
            totals[s] += counts.get(s, 0)
    table.add_section()
    table.add_row("all", *(f"[bold]{totals[s]}[/]" for s in STATUSES))
    caption = Text(
        f"runs started here: {state.executions}, retries: {state.retried} "
        "(scheduled = waiting out a retry backoff)",
        style="dim",
    )
    return Group(table, caption, Text("\n".join(state.events[-12:])))


def summary_view(r: AtWorkResult) -> Group:
    table = Table(title="every job accounted for", title_justify="left")
    for column in ("enqueued", "done", "failed", "lost", "stuck", "duplicate runs"):
        table.add_column(column, justify="right")
    bad = "[bold red]"
    table.add_row(
        str(r.enqueued),
        str(r.done),
        str(r.failed),
        f"{bad}{r.lost}[/]" if r.lost else "0",
        f"{bad}{r.stuck}[/]" if r.stuck else "0",
        str(r.duplicates),
    )
    ok = r.enqueued == r.done + r.failed and not r.lost and not r.stuck

    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.2f}s after the kill"

    lines = [
        f"enqueued = done + failed: {'yes' if ok else '[bold red]NO[/]'}; "
        f"{r.retried} failed attempts were retried after a backoff.",
        f"lease worker killed: job recovered {seconds(r.lease_recovery_seconds)} "
        "(once its lease expired).",
        f"held-lock worker killed: job recovered {seconds(r.held_recovery_seconds)} "
        "(its transaction rolled back; the claim that found it counted the dead attempt).",
        f"{r.duplicates} job runs were repeated: a killed worker's side effects had happened "
        "(at-least-once: make tasks idempotent).",
        "rolled-back transactional enqueue left no job: "
        + ("yes" if r.rolled_back_enqueue_absent else "[bold red]NO[/]"),
    ]
    return Group(table, Text.from_markup("\n".join(lines)))
