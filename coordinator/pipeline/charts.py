"""The report's PNG charts (matplotlib, no display needed).

Each function takes small, already aggregated figures (a few hundred rows at
most) and writes one chart a person can read at a glance: a title that says
what is shown, labelled axes with units, the same colour for a state in
every chart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure  # the Agg canvas: no display, no pyplot state
from matplotlib.ticker import FuncFormatter, PercentFormatter

STATE_COLOURS = {
    "committed": "#2e7d32",
    "rolled_back": "#f9a825",
    "discarded": "#c62828",
    "expired": "#6d4c41",
    "prepared": "#1565c0",
}
DPI = 110


def _save(figure: Figure, path: Path) -> Path:
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


def messages_by_hour(
    hours: Sequence[datetime], counts: Mapping[str, Sequence[int]], path: Path
) -> Path:
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
    axes.yaxis.set_major_formatter(FuncFormatter(_thousands))
    axes.set_ylabel("messages")
    _legend_on_top(axes, "Half messages per hour of birth (UTC), by current state", 5)
    return _save(figure, path)


def latency_by_group(
    labels: Sequence[str], percentiles: Mapping[str, Sequence[float | None]], path: Path
) -> Path:
    """Grouped horizontal bars: p50/p90/p99 prepare-to-resolution seconds per group and topic."""
    figure = Figure(figsize=(10, 0.5 * len(labels) + 1.8))
    axes = figure.subplots()
    height = 0.8 / max(1, len(percentiles))
    colours = ("#90caf9", "#1e88e5", "#0d47a1")
    for index, (name, values) in enumerate(percentiles.items()):
        offsets = [i + index * height for i in range(len(labels))]
        axes.barh(
            offsets,
            [v or 0 for v in values],
            height=height,
            label=name,
            color=colours[index % len(colours)],
        )
    axes.set_yticks([i + height for i in range(len(labels))])
    axes.set_yticklabels(labels)
    axes.invert_yaxis()
    axes.set_xscale("symlog", linthresh=1)
    axes.set_xlabel("seconds from prepare to commit or rollback (log scale)")
    _legend_on_top(axes, "Resolution latency by producer group and topic", 3)
    return _save(figure, path)


def check_count_histogram(check_counts: Sequence[int], messages: Sequence[int], path: Path) -> Path:
    """Bars: how many half messages needed how many check-backs."""
    figure = Figure(figsize=(9, 4))
    axes = figure.subplots()
    bars = axes.bar([str(c) for c in check_counts], messages, color="#5e35b1")
    axes.bar_label(bars, labels=[f"{m:,}" for m in messages], fontsize="small", padding=2)
    axes.yaxis.set_major_formatter(FuncFormatter(_thousands))
    axes.margins(y=0.12)
    axes.set_xlabel("check-backs of the message")
    axes.set_ylabel("messages")
    axes.set_title("Check-back count distribution")
    return _save(figure, path)


def _bar_rows(labels: Sequence[str]) -> tuple[Figure, Axes, range]:
    """A figure of one horizontal bar row per label, top to bottom."""
    figure = Figure(figsize=(10, 0.45 * len(labels) + 1.8))
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


def rates_by_group(
    labels: Sequence[str],
    discard_rates: Sequence[float],
    expiry_rates: Sequence[float],
    path: Path,
) -> Path:
    """Side-by-side bars: share of messages discarded and expired per group and topic."""
    figure, axes, rows = _bar_rows(labels)
    _paired_bars(
        axes,
        rows,
        [
            (discard_rates, STATE_COLOURS["discarded"], "discarded"),
            (expiry_rates, STATE_COLOURS["expired"], "expired"),
        ],
    )
    axes.xaxis.set_major_formatter(PercentFormatter(1.0))
    axes.set_xlabel("share of the group's messages")
    _legend_on_top(axes, "Discard and expiry rates by producer group and topic", 2)
    return _save(figure, path)


def pending_ages(
    labels: Sequence[str], pending: Sequence[int], oldest_hours: Sequence[float], path: Path
) -> Path:
    """Bars: oldest pending half message per group and topic, with the pending count."""
    figure, axes, rows = _bar_rows(labels)
    axes.barh(list(rows), oldest_hours, color=STATE_COLOURS["prepared"])
    for row, (hours, count) in enumerate(zip(oldest_hours, pending, strict=True)):
        axes.text(hours, row, f"  {count:,} pending", va="center", fontsize="small")
    axes.set_xlabel("age of the oldest pending half message (hours)")
    axes.set_title("Pending transactions by producer group and topic")
    axes.margins(x=0.2)
    return _save(figure, path)


def consumer_lag(
    labels: Sequence[str], lag: Sequence[int], dead_letters: Sequence[int], path: Path
) -> Path:
    """Bars: undelivered and dead-lettered messages per consumer group and topic."""
    figure, axes, rows = _bar_rows(labels)
    _paired_bars(
        axes,
        rows,
        [(lag, "#00838f", "lag (not acknowledged)"), (dead_letters, "#ad1457", "dead letters")],
    )
    axes.xaxis.set_major_formatter(FuncFormatter(_thousands))
    axes.set_xlabel("messages")
    _legend_on_top(axes, "Consumer lag by consumer group and topic", 2)
    return _save(figure, path)
