"""The report's PNG charts (matplotlib, no display needed).

Each chart has a builder that takes small, already aggregated figures (a few
hundred rows at most) and returns the matplotlib Figure, and a function that
writes it as a PNG. A chart is readable at a glance: a title that says what
is shown, labelled axes with units, the same colour for a state in every
chart, axes that hold every value (counts and shares start at zero, never
below), and a sentence instead of an empty frame when there is nothing to show.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure  # the Agg canvas: no display, no pyplot state
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter, PercentFormatter

STATE_COLOURS = {
    "committed": "#2e7d32",
    "rolled_back": "#f9a825",
    "discarded": "#c62828",
    "expired": "#6d4c41",
    "prepared": "#1565c0",
}
LATENCY_COLOURS = ("#90caf9", "#1e88e5", "#0d47a1")
DPI = 110
# Share of the largest value left free at the end of a zero-based axis.
HEADROOM = 1.1
# The empty axis of a share: 0 to 1 %.
EMPTY_SHARE = 0.01
LABEL_CHARS = 32  # longest name on a bar's label
ROW_INCHES = 0.6  # height per bar row (its label has two lines)


def save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return path


def _legend_on_top(axes: Axes, title: str, columns: int) -> None:
    """Title, then the legend under it: never over the bars."""
    axes.set_title(title, pad=26)
    axes.legend(
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncols=columns,
        frameon=False,
        fontsize="small",
    )


def _thousands(value: float, _position: int) -> str:
    return f"{value:,.0f}"


def _seconds_tick(value: float, _position: int) -> str:
    """A tick of a time axis: milliseconds below a second, then seconds (the log axis' decades)."""
    if value <= 0:
        return "0"
    if value < 1:
        return f"{value * 1000:,.3g} ms"
    return f"{value:,g} s"


def row_label(*names: str) -> str:
    """A bar's label: one line per name (group, topic), a long one shortened in the middle.

    The tables of the report give every name whole; a chart's labels must
    leave it room for its bars.
    """
    return "\n".join(_shortened(name) for name in names)


def _shortened(name: str) -> str:
    if len(name) <= LABEL_CHARS:
        return name
    keep = LABEL_CHARS - 1
    return f"{name[: keep - keep // 2]}\N{HORIZONTAL ELLIPSIS}{name[-(keep // 2) :]}"


def _say_empty(axes: Axes, sentence: str) -> None:
    axes.text(
        0.5,
        0.5,
        sentence,
        transform=axes.transAxes,
        ha="center",
        va="center",
        color="#555555",
        bbox={"facecolor": "white", "edgecolor": "#cccccc", "boxstyle": "round"},
    )


def _zero_based_x(axes: Axes, values: Sequence[float], empty_end: float) -> bool:
    """x from 0 to just past the largest value (to empty_end when all are 0); True if any is > 0."""
    largest = max(values, default=0)
    axes.set_xlim(0, largest * HEADROOM if largest > 0 else empty_end)
    return largest > 0


def log_limits(values: Sequence[float]) -> tuple[float, float] | None:
    """Limits of a log axis on which every positive value is a bar at least a decade long.

    From the decade below half the smallest value to a bit past the largest;
    None when no value is positive (a log axis cannot show 0).
    """
    positive = [v for v in values if v > 0]
    if not positive:
        return None
    low = 10.0 ** math.floor(math.log10(min(positive) / 2))
    return low, max(positive) * 1.5


def messages_by_hour_figure(
    hours: Sequence[datetime], counts: Mapping[str, Sequence[int]]
) -> Figure:
    """Stacked bars: messages born per hour, by the state they are in now."""
    figure = Figure(figsize=(11, 4.5))
    axes = figure.subplots()
    positions = range(len(hours))
    bottom = [0] * len(hours)
    for state, colour in STATE_COLOURS.items():
        values = list(counts.get(state, [0] * len(hours)))
        axes.bar(positions, values, bottom=bottom, color=colour, label=state, width=0.9)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    step = max(1, len(hours) // 12)
    axes.set_xticks(list(positions)[::step])
    axes.set_xticklabels(
        [h.strftime("%m-%d %H:00") for h in hours][::step], rotation=30, ha="right"
    )
    axes.set_ylim(bottom=0)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_formatter(FuncFormatter(_thousands))
    axes.set_ylabel("messages")
    _legend_on_top(axes, "Half messages per hour of birth (UTC), by current state", 5)
    return figure


def messages_by_hour(
    hours: Sequence[datetime], counts: Mapping[str, Sequence[int]], path: Path
) -> Path:
    return save(messages_by_hour_figure(hours, counts), path)


def latency_figure(
    labels: Sequence[str], percentiles: Mapping[str, Sequence[float | None]]
) -> Figure:
    """Grouped horizontal bars: p50/p90/p99 prepare-to-resolution time per group and topic.

    On a log axis: latencies of 10 ms and of minutes side by side, each bar
    long enough to see. A group without commits or rollbacks has no bars.
    """
    figure = Figure(figsize=(10, ROW_INCHES * len(labels) + 1.8))
    axes = figure.subplots()
    height = 0.8 / max(1, len(percentiles))
    values = {name: [v if v is not None else 0.0 for v in row] for name, row in percentiles.items()}
    limits = log_limits([v for row in values.values() for v in row])
    if limits is None:
        axes.set_xlim(0, 1)
        axes.xaxis.set_major_formatter(FuncFormatter(_seconds_tick))
        _say_empty(axes, "no message committed or rolled back by its producer")
        low = 0.0
    else:
        axes.set_xscale("log")
        axes.set_xlim(*limits)
        axes.xaxis.set_major_formatter(FuncFormatter(_seconds_tick))
        axes.xaxis.set_minor_formatter(NullFormatter())
        low = limits[0]
    for index, (name, row) in enumerate(values.items()):
        offsets = [i + index * height for i in range(len(labels))]
        # Bars start at the axis' left end: a log axis has no 0.
        axes.barh(
            offsets,
            [max(v - low, 0.0) if v > 0 else 0.0 for v in row],
            left=low,
            height=height,
            label=name,
            color=LATENCY_COLOURS[index % len(LATENCY_COLOURS)],
        )
    axes.set_yticks([i + height for i in range(len(labels))])
    axes.set_yticklabels(labels)
    axes.invert_yaxis()
    scale = " (log scale)" if limits is not None else ""
    axes.set_xlabel(f"time from prepare to commit or rollback{scale}")
    _legend_on_top(axes, "Resolution latency by producer group and topic", 3)
    return figure


def latency_by_group(
    labels: Sequence[str], percentiles: Mapping[str, Sequence[float | None]], path: Path
) -> Path:
    return save(latency_figure(labels, percentiles), path)


def check_count_figure(check_counts: Sequence[int], messages: Sequence[int]) -> Figure:
    """Bars: how many half messages needed how many check-backs."""
    figure = Figure(figsize=(9, 4))
    axes = figure.subplots()
    bars = axes.bar([str(c) for c in check_counts], messages, color="#5e35b1")
    axes.bar_label(bars, labels=[f"{m:,}" for m in messages], fontsize="small", padding=2)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_formatter(FuncFormatter(_thousands))
    axes.margins(y=0.12)
    axes.set_ylim(bottom=0)
    axes.set_xlabel("check-backs of the message")
    axes.set_ylabel("messages")
    axes.set_title("Check-back count distribution")
    return figure


def check_count_histogram(check_counts: Sequence[int], messages: Sequence[int], path: Path) -> Path:
    return save(check_count_figure(check_counts, messages), path)


def _bar_rows(labels: Sequence[str]) -> tuple[Figure, Axes, range]:
    """A figure of one horizontal bar row per label, top to bottom."""
    figure = Figure(figsize=(10, ROW_INCHES * len(labels) + 1.8))
    axes = figure.subplots()
    rows = range(len(labels))
    axes.set_yticks(list(rows))
    axes.set_yticklabels(labels)
    axes.invert_yaxis()
    return figure, axes, rows


def _paired_bars(
    axes: Axes, rows: range, pairs: Sequence[tuple[Sequence[float], str, str]]
) -> None:
    """Two bars per row, side by side: (values, colour, label) each."""
    for offset, (values, colour, label) in zip((-0.2, 0.2), pairs, strict=True):
        axes.barh([r + offset for r in rows], values, height=0.4, color=colour, label=label)


def rates_figure(
    labels: Sequence[str],
    discard_rates: Sequence[float | None],
    expiry_rates: Sequence[float | None],
) -> Figure:
    """Side-by-side bars: share of messages discarded and expired per group and topic."""
    figure, axes, rows = _bar_rows(labels)
    discarded = [r or 0.0 for r in discard_rates]
    expired = [r or 0.0 for r in expiry_rates]
    _paired_bars(
        axes,
        rows,
        [
            (discarded, STATE_COLOURS["discarded"], "discarded"),
            (expired, STATE_COLOURS["expired"], "expired"),
        ],
    )
    if not _zero_based_x(axes, [*discarded, *expired], EMPTY_SHARE):
        _say_empty(axes, "no message discarded or expired")
    axes.xaxis.set_major_formatter(PercentFormatter(1.0))
    axes.set_xlabel("share of the group's messages")
    _legend_on_top(axes, "Discard and expiry rates by producer group and topic", 2)
    return figure


def rates_by_group(
    labels: Sequence[str],
    discard_rates: Sequence[float | None],
    expiry_rates: Sequence[float | None],
    path: Path,
) -> Path:
    return save(rates_figure(labels, discard_rates, expiry_rates), path)


def pending_ages_figure(
    labels: Sequence[str], pending: Sequence[int], oldest_hours: Sequence[float]
) -> Figure:
    """Bars: oldest pending half message per group and topic, with the pending count."""
    figure, axes, rows = _bar_rows(labels)
    axes.barh(list(rows), oldest_hours, color=STATE_COLOURS["prepared"])
    for row, (hours, count) in enumerate(zip(oldest_hours, pending, strict=True)):
        axes.text(hours, row, f"  {count:,} pending", va="center", fontsize="small")
    # Room for the "N pending" notes after the longest bar.
    largest = max(oldest_hours, default=0)
    axes.set_xlim(0, largest * 1.3 if largest > 0 else 1)
    axes.set_xlabel("age of the oldest pending half message (hours)")
    axes.set_title("Pending transactions by producer group and topic")
    return figure


def pending_ages(
    labels: Sequence[str], pending: Sequence[int], oldest_hours: Sequence[float], path: Path
) -> Path:
    return save(pending_ages_figure(labels, pending, oldest_hours), path)


def consumer_lag_figure(
    labels: Sequence[str], lag: Sequence[int], dead_letters: Sequence[int]
) -> Figure:
    """Bars: undelivered and dead-lettered messages per consumer group and topic."""
    figure, axes, rows = _bar_rows(labels)
    _paired_bars(
        axes,
        rows,
        [(lag, "#00838f", "lag (not acknowledged)"), (dead_letters, "#ad1457", "dead letters")],
    )
    if not _zero_based_x(axes, [*lag, *dead_letters], 1):
        _say_empty(axes, "no lag and no dead letters")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.xaxis.set_major_formatter(FuncFormatter(_thousands))
    axes.set_xlabel("messages")
    _legend_on_top(axes, "Consumer lag by consumer group and topic", 2)
    return figure


def consumer_lag(
    labels: Sequence[str], lag: Sequence[int], dead_letters: Sequence[int], path: Path
) -> Path:
    return save(consumer_lag_figure(labels, lag, dead_letters), path)
