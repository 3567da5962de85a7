"""The report's charts: axes that hold every value, never a negative count or share.

The figures are the ones the report draws; they are checked on their axes
after being drawn (limits, tick labels, the bars' size on the canvas) and
written as PNG next to the test's files for a person to look at.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from coordinator.pipeline import charts

GROUPS = ["shop / orders", "billing / invoices", "fast / pings"]


def _drawn(figure: Figure, path: Path) -> Axes:
    """The chart's axes after drawing it as the report does (so ticks are final)."""
    charts.save(figure, path)
    assert path.read_bytes().startswith(b"\x89PNG")
    return figure.axes[0]


def _tick_labels(axes: Axes) -> list[str]:
    low, high = sorted(axes.get_xlim())
    return [
        tick.get_text()
        for tick, value in zip(axes.get_xticklabels(), axes.get_xticks(), strict=True)
        if low <= value <= high and tick.get_text()
    ]


def _bars(axes: Axes) -> list[Rectangle]:
    return [p for p in axes.patches if isinstance(p, Rectangle) and p.get_height() > 0]


def _texts(axes: Axes) -> list[str]:
    return [t.get_text() for t in axes.texts]


def test_rates_without_discards_or_expiries_start_at_zero_and_say_so(tmp_path: Path) -> None:
    axes = _drawn(
        charts.rates_figure(GROUPS, [0.0, 0.0, None], [0.0, 0.0, 0.0]), tmp_path / "r.png"
    )

    low, high = axes.get_xlim()
    assert low == 0 and high > 0
    labels = _tick_labels(axes)
    assert float(labels[0].rstrip("%")) == 0 and not any(
        label.startswith(("-", "\N{MINUS SIGN}")) for label in labels
    )
    assert "no message discarded or expired" in _texts(axes)


def test_rates_hold_the_largest_share(tmp_path: Path) -> None:
    axes = _drawn(
        charts.rates_figure(GROUPS, [0.02, 0.0, 0.3], [0.001, 0.0, 0.0]), tmp_path / "r.png"
    )

    low, high = axes.get_xlim()
    assert low == 0 and high >= 0.3
    assert not any(label.startswith(("-", "\N{MINUS SIGN}")) for label in _tick_labels(axes))
    assert _texts(axes) == []


def test_latencies_of_10_ms_and_of_minutes_are_bars_one_can_see(tmp_path: Path) -> None:
    percentiles = {
        "p50": [2.0, 0.5, 0.01],
        "p90": [120.0, 3.0, 0.012],
        "p99": [190.0, 9.0, 0.02],
    }
    figure = charts.latency_figure(GROUPS, percentiles)
    axes = _drawn(figure, tmp_path / "latency.png")

    low, high = axes.get_xlim()
    assert low < 0.01 and high > 190
    width = axes.get_window_extent().width
    bars = _bars(axes)
    assert sorted(bar.get_x() + bar.get_width() for bar in bars) == pytest.approx(
        sorted(v for row in percentiles.values() for v in row)
    )
    # On the canvas, the shortest bar (10 ms) is a twentieth of the axis or more.
    shortest = min(bars, key=lambda bar: bar.get_x() + bar.get_width())
    extent = shortest.get_window_extent()
    assert extent.width >= width / 20
    labels = _tick_labels(axes)
    assert "10 ms" in labels and "100 s" in labels


def test_latency_without_commits_or_rollbacks_says_so(tmp_path: Path) -> None:
    axes = _drawn(
        charts.latency_figure(GROUPS[:1], {"p50": [None], "p90": [None], "p99": [None]}),
        tmp_path / "latency.png",
    )

    assert axes.get_xscale() == "linear" and axes.get_xlim()[0] == 0
    assert "no message committed or rolled back by its producer" in _texts(axes)


def test_consumer_lag_without_any_starts_at_zero(tmp_path: Path) -> None:
    axes = _drawn(charts.consumer_lag_figure(["billing / orders"], [0], [0]), tmp_path / "lag.png")

    assert axes.get_xlim()[0] == 0
    labels = _tick_labels(axes)
    assert labels[0] == "0" and not any(
        label.startswith(("-", "\N{MINUS SIGN}")) for label in labels
    )
    assert all(float(label.replace(",", "")).is_integer() for label in labels)
    assert "no lag and no dead letters" in _texts(axes)


def test_pending_ages_start_at_zero_with_room_for_the_counts(tmp_path: Path) -> None:
    axes = _drawn(charts.pending_ages_figure(GROUPS[:2], [3, 1], [30.5, 0.0]), tmp_path / "p.png")

    low, high = axes.get_xlim()
    assert low == 0 and high > 30.5


def test_bar_labels_give_each_name_a_line_and_shorten_long_ones_in_the_middle() -> None:
    label = charts.row_label("payments-settlement-reconciliation-service", "orders")

    group, topic = label.split("\n")
    assert len(group) == charts.LABEL_CHARS and "\N{HORIZONTAL ELLIPSIS}" in group
    assert group.startswith("payments-settlem") and group.endswith("reconciliation-service"[-15:])
    assert topic == "orders"
