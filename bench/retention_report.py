"""The figures of bench.retention_layouts side by side: ratios, the comparison, the table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

console = Console(width=120)


def filled_ratios(result: dict[str, Any]) -> dict[str, float | None]:
    """The filled layout's throughput against the empty one: against the mean of the
    two empty measures (before the fill, and truncated at the end) and each alone."""
    filled = result["filled"]["messages_per_second"]
    empty, emptied = (result[w]["messages_per_second"] for w in ("empty", "emptied"))
    return {
        "filled_vs_empty": ratio(filled, (empty + emptied) / 2),
        "filled_vs_empty_before_fill": ratio(filled, empty),
        "filled_vs_emptied_at_end": ratio(filled, emptied),
    }


def compare(layouts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The figures the choice rests on, side by side."""
    figures: dict[str, Any] = {
        name: {
            "filled_vs_empty": result["filled_vs_empty"],
            "removal_seconds": result["removal"]["seconds"],
            "throughput_during_removal_vs_before": result["removal"]["throughput_vs_before"],
            "p99_during_removal_vs_before": result["removal"]["p99_vs_before"],
            "vacuum_seconds": result["vacuum_seconds"],
            "messages_bytes_after_vacuum_vs_filled": ratio(
                _bytes(result["sizes_after_vacuum"], "messages"),
                _bytes(result["sizes_filled"], "messages"),
            ),
        }
        for name, result in layouts.items()
    }
    if {"plain", "partitioned"} <= layouts.keys():
        plain, partitioned = layouts["plain"], layouts["partitioned"]
        figures["partitioned_vs_plain"] = {
            window: ratio(
                partitioned[window]["messages_per_second"], plain[window]["messages_per_second"]
            )
            for window in ("empty", "filled", "emptied")
        }
    return figures


def print_report(report: dict[str, Any]) -> None:
    table = Table(title=f"Retention layouts ({report['settings']['rows']} resolved messages)")
    for column in ("layout", "window", "msgs/s", "p50 ms", "p99 ms", "vs. reference", "notes"):
        table.add_column(
            column, justify="left" if column in ("layout", "window", "notes") else "right"
        )
    for name, result in report["layouts"].items():
        removal = result["removal"]
        rows = [
            ("empty", result["empty"], "", "before the fill, a fresh server"),
            (
                "filled",
                result["filled"],
                f"{result['filled_vs_empty']}x empty (both)",
                "target >= 0.9x",
            ),
            ("before removal", removal["load_before"], "", ""),
            (
                "during removal",
                removal["load_during"],
                f"{removal['throughput_vs_before']}x before",
                f"{removal['rows']:,} msgs in {removal['seconds']} s; {removal['method']}",
            ),
            ("after removal", removal["load_after"], "", ""),
            ("emptied", result["emptied"], "", "truncated at the end, the empty reference too"),
        ]
        for window, figures, ratio, notes in rows:
            table.add_row(
                name,
                window,
                f"{figures['messages_per_second']:,.0f}",
                f"{figures['p50_ms']:.2f}",
                f"{figures['p99_ms']:.2f}",
                ratio,
                notes,
            )
        sizes = [
            f"{label} {_bytes(result[key], 'messages') / 2**20:,.0f} MiB"
            for label, key in (
                ("filled", "sizes_filled"),
                ("removed", "sizes_after_removal"),
                ("vacuumed", "sizes_after_vacuum"),
            )
        ]
        table.add_row(name, "messages size", "", "", "", "", ", ".join(sizes))
    console.print(table)


def _bytes(sizes: dict[str, dict[str, int]], table: str) -> float:
    return float(sizes[table]["total"])


def ratio(value: float, base: float) -> float | None:
    return round(value / base, 3) if base else None
