"""The queues page's charts of the last hour, as inline SVG written here, on the server: no
script and no chart library (the Content-Security-Policy runs nothing but ``live.js``).

Each chart is an ``<svg role="img">`` named by its ``<title>`` and summed up by its ``<desc>``
(what a screen reader says), each minute's bar has a ``<title>`` of its own (the browser's
tooltip), and the page gives every number in a table below the charts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

from skiplock._db.job_charts import Minute

WIDTH, HEIGHT = 372, 132
LEFT, TOP, BOTTOM = 44, 8, 22  # room for the scale on the left and the times below
DONE, FAILED, WAIT_P95, WAIT_MEAN = "#4c9a5b", "#c44e4e", "#9db8e0", "#2f5f9e"


@dataclass(frozen=True)
class Series:
    """Bars of one colour; ``stacked`` bars sit on the previous series' bars."""

    name: str
    values: Sequence[float | None]
    colour: str
    stacked: bool = False


def _number(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.1f}s" if value < 100 else f"{value:.0f}s"
    return f"{value:g}"


def _hhmm(minute: datetime) -> str:
    return minute.strftime("%H:%M")


def chart(
    ident: str, title: str, summary: str, minutes: Sequence[datetime], series: Sequence[Series],
    unit: str = "",
) -> Markup:  # fmt: skip
    """An SVG bar chart of ``series`` over ``minutes`` (one bar slot a minute)."""
    tops = [0.0] * len(minutes)
    for s in series:
        for i, v in enumerate(s.values):
            base = tops[i] if s.stacked else 0.0
            tops[i] = max(tops[i], base + (v or 0.0))
    scale = max(tops) or 1.0
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(minutes), 1)
    bar = max(slot - 1, 1)
    parts = [
        f'<svg class="chart" id="{ident}" role="img" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" aria-labelledby="{ident}-t {ident}-d">',
        f'<title id="{ident}-t">{escape(title)}</title>',
        f'<desc id="{ident}-d">{escape(summary)}</desc>',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - 4}" y2="{TOP + plot_h}" '
        'stroke="#aab"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 9}" text-anchor="end" font-size="10">'
        f"{escape(_number(scale, unit))}</text>",
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" font-size="10">0</text>',
    ]
    if minutes:
        parts.append(
            f'<text x="{LEFT}" y="{HEIGHT - 6}" font-size="10">{_hhmm(minutes[0])}</text>'
            f'<text x="{WIDTH - 4}" y="{HEIGHT - 6}" text-anchor="end" font-size="10">'
            f"{_hhmm(minutes[-1])}</text>"
        )
    for i, minute in enumerate(minutes):
        values = [(s, s.values[i]) for s in series]
        if not any(v for _, v in values):
            continue
        said = ", ".join(f"{s.name} {_number(v or 0.0, unit)}" for s, v in values)
        parts.append(f"<g><title>{_hhmm(minute)}: {escape(said)}</title>")
        base = 0.0
        for s, v in values:
            start = base if s.stacked else 0.0
            h = (v or 0.0) / scale * plot_h
            y = TOP + plot_h - (start + (v or 0.0)) / scale * plot_h
            if h > 0:
                parts.append(
                    f'<rect x="{LEFT + i * slot:.1f}" y="{y:.1f}" width="{bar:.1f}" '
                    f'height="{h:.1f}" fill="{s.colour}"/>'
                )
            base = start + (v or 0.0)
        parts.append("</g>")
    parts.append("</svg>")
    return Markup("".join(parts))


def queue_charts(
    queue: str, n: int, minutes: Sequence[datetime], series: Sequence[Minute]
) -> Markup:
    """The three charts of one queue (``n``: its place on the page, for unique ids)."""
    done = [m.done for m in series]
    failed = [m.failed for m in series]
    p95 = [m.wait_p95 for m in series]
    mean = [m.wait_mean for m in series]
    span = f"the last {len(minutes)} minutes"
    waits = [w for w in p95 if w is not None]
    worst = max((m for m in series if m.wait_max is not None), key=lambda m: m.wait_max or 0,
                default=None)  # fmt: skip
    throughput = chart(
        f"chart-{n}-throughput",
        f"Jobs of queue {queue} finished per minute",
        f"In {span}: {sum(done)} done, {sum(failed)} failed; busiest minute "
        f"{max((d + f for d, f in zip(done, failed, strict=True)), default=0)} jobs.",
        minutes,
        [Series("done", done, DONE), Series("failed", failed, FAILED, stacked=True)],
    )
    failures = chart(
        f"chart-{n}-failures",
        f"Jobs of queue {queue} failed per minute",
        f"In {span}: {sum(failed)} failed, in {sum(1 for f in failed if f)} of the minutes.",
        minutes,
        [Series("failed", failed, FAILED)],
    )
    wait = chart(
        f"chart-{n}-wait",
        f"Wait of queue {queue}'s jobs before they started (due to start), per minute",
        f"In {span}: " + (
            f"95th percentile up to {_number(max(waits), 's')}, longest "
            f"{_number(worst.wait_max or 0.0, 's')}." if waits and worst else "no job finished."
        ),
        minutes,
        [Series("p95", p95, WAIT_P95), Series("mean", mean, WAIT_MEAN)],
        unit="s",
    )  # fmt: skip
    return Markup("").join([
        _figure(throughput, "Finished per minute", [("done", DONE), ("failed", FAILED)]),
        _figure(failures, "Failed per minute", [("failed", FAILED)]),
        _figure(wait, "Wait before start, seconds", [("p95", WAIT_P95), ("mean", WAIT_MEAN)]),
    ])  # fmt: skip


def _figure(svg: Markup, caption: str, legend: Sequence[tuple[str, str]]) -> Markup:
    """A chart with its visible caption and legend (the SVG's title names it to screen
    readers; the caption is what the eye reads, so it is hidden from them)."""
    keys = "".join(
        f'<span class="key"><span class="swatch" style="background:{colour}"></span>'
        f"{escape(name)}</span>"
        for name, colour in legend
    )
    return Markup(
        f'<figure class="chart"><figcaption aria-hidden="true">{escape(caption)} {keys}'
        f"</figcaption>{svg}</figure>"
    )
