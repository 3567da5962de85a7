"""The steady-state run cut into windows, and its first third against its last.

Only the windows after retention has started to remove rows count (before,
the tables fill by design): those are split in thirds, and each figure of
the last third is divided by the same figure of the first. The targets are
issue 28's: table sizes and row counts at most 1.3x, the single-message p50
latency and the throughput within 1.25x.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.steady_load import CONSUMER_GROUPS, Samples

SIZE_TARGET = 1.3
SPEED_TARGET = 1.25


@dataclass(frozen=True)
class Snapshot:
    """The tables at one moment: {table: (rows, bytes)}, and the machine's 1-minute
    load average then (the run shares its cores with whatever else runs)."""

    at: float
    tables: dict[str, tuple[int, int]]
    load_average: float

    @property
    def rows(self) -> int:
        return sum(rows for rows, _ in self.tables.values())

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.tables.values())


def percentile(ordered: list[float], percent: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(percent / 100 * len(ordered)))]


def window(samples: Samples, since: float, until: float, snapshot: Snapshot) -> dict[str, Any]:
    """One window's figures; `since` and `until` are perf_counter times, the
    snapshot is the tables as read at the window's end."""
    latencies = sorted(lat for done, lat, _ in samples.transactions if since <= done < until)
    commits = sum(1 for done, _, ok in samples.transactions if since <= done < until and ok)
    seconds = until - since
    return {
        "messages": len(latencies),
        "committed": commits,
        "messages_per_second": round(len(latencies) / seconds, 1),
        "p50_ms": round(percentile(latencies, 50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 99) * 1000, 3),
        "consumed_per_second": {
            group: round(
                sum(n for at, n in samples.consumed[group] if since <= at < until) / seconds, 1
            )
            for group in CONSUMER_GROUPS
        },
        "rows": snapshot.rows,
        "bytes": snapshot.bytes,
        "load_average": snapshot.load_average,
        "tables": {
            name: {"rows": rows, "bytes": size} for name, (rows, size) in snapshot.tables.items()
        },
    }


def thirds(
    samples: Samples, windows: list[dict[str, Any]], bounds: list[tuple[float, float]]
) -> dict[str, Any]:
    """First third against last third of the windows marked `steady`."""
    steady = [i for i, w in enumerate(windows) if w["steady"]]
    size = len(steady) // 3
    if size == 0:
        raise RuntimeError(
            f"{len(steady)} window(s) after retention started: too few for thirds "
            "(run longer, or with a shorter retention or window)"
        )
    first, last = steady[:size], steady[-size:]
    figures = {"first": _third(samples, windows, bounds, first)}
    figures["last"] = _third(samples, windows, bounds, last)
    ratios = {
        name: _ratio(figures["last"][name], figures["first"][name])
        for name in ("bytes", "rows", "p50_ms", "messages_per_second")
    }
    tables = {
        name: {
            figure: _ratio(
                figures["last"]["tables"][name][figure], figures["first"]["tables"][name][figure]
            )
            for figure in ("rows", "bytes")
        }
        for name in figures["first"]["tables"]
    }
    checks = {
        "bytes": _at_most(ratios["bytes"], SIZE_TARGET),
        "rows": _at_most(ratios["rows"], SIZE_TARGET),
        "p50_ms": _at_most(ratios["p50_ms"], SPEED_TARGET),
        # Throughput within 1.25x either way: the load is fixed, so more is as
        # suspicious as less (a backlog caught up).
        "messages_per_second": ratios["messages_per_second"] is not None
        and 1 / SPEED_TARGET <= ratios["messages_per_second"] <= SPEED_TARGET,
    }
    return {
        "windows": {"first": first, "last": last},
        **figures,
        "last_vs_first": ratios,
        "tables_last_vs_first": tables,
        "targets": {
            "bytes": f"<= {SIZE_TARGET}",
            "rows": f"<= {SIZE_TARGET}",
            "p50_ms": f"<= {SPEED_TARGET}",
            "messages_per_second": f"within {SPEED_TARGET}x either way",
        },
        "pass": checks,
        "passed": all(checks.values()),
    }


def _third(
    samples: Samples,
    windows: list[dict[str, Any]],
    bounds: list[tuple[float, float]],
    indexes: list[int],
) -> dict[str, Any]:
    since, until = bounds[indexes[0]][0], bounds[indexes[-1]][1]
    latencies = sorted(lat for done, lat, _ in samples.transactions if since <= done < until)
    return {
        "bytes": round(mean(windows[i]["bytes"] for i in indexes)),
        "rows": round(mean(windows[i]["rows"] for i in indexes)),
        "p50_ms": round(percentile(latencies, 50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 99) * 1000, 3),
        "messages_per_second": round(len(latencies) / (until - since), 1),
        "tables": {
            name: {
                "rows": round(mean(windows[i]["tables"][name]["rows"] for i in indexes)),
                "bytes": round(mean(windows[i]["tables"][name]["bytes"] for i in indexes)),
            }
            for name in windows[indexes[0]]["tables"]
        },
    }


def _ratio(last: float, first: float) -> float | None:
    return round(last / first, 3) if first else None


def _at_most(ratio: float | None, target: float) -> bool:
    return ratio is not None and ratio <= target


def print_report(console: Console, report: dict[str, Any]) -> None:
    table = Table(title="Steady state: one row per window (tables as read at its end)")
    columns = ("end s", "msg/s", "p50 ms", "p99 ms", "consumed/s", "rows", "MB", "load", "steady")
    for column in columns:
        table.add_column(column, justify="right")
    for w in report["windows"]:
        consumed = " / ".join(f"{v:.0f}" for v in w["consumed_per_second"].values())
        table.add_row(
            f"{w['end_seconds']:.0f}",
            f"{w['messages_per_second']:.0f}",
            f"{w['p50_ms']:.2f}",
            f"{w['p99_ms']:.2f}",
            consumed,
            f"{w['rows']:,}",
            f"{w['bytes'] / 1e6:.1f}",
            f"{w['load_average']:.1f}",
            "yes" if w["steady"] else "",
        )
    console.print(table)
    comparison = report["comparison"]
    verdict = Table(title="Last third vs first third (windows after retention started)")
    for column in ("figure", "first", "last", "last / first", "target", "pass"):
        verdict.add_column(column, justify="right")
    for name in ("bytes", "rows", "p50_ms", "messages_per_second"):
        verdict.add_row(
            name,
            f"{comparison['first'][name]:,}",
            f"{comparison['last'][name]:,}",
            str(comparison["last_vs_first"][name]),
            comparison["targets"][name],
            "yes" if comparison["pass"][name] else "NO",
        )
    console.print(verdict)
    totals = report["totals"]
    console.print(
        f"{totals['messages']:,} transactions ({totals['committed']:,} committed) in "
        f"{totals['seconds']:.0f} s at {report['settings']['rate']} msg/s asked; consumed "
        + ", ".join(f"{g}: {n:,}" for g, n in totals["consumed"].items())
        + f"; retention removed {totals['retention_removed']}; "
        f"{totals['behind']} producer slots reached late"
    )
    naptime = report["settings"].get("autovacuum_naptime_seconds")
    console.print(
        f"autovacuum_naptime {naptime} s (scaled with the lifetime)"
        if naptime is not None
        else "autovacuum_naptime: your server's own"
    )
    console.print("[bold]passed[/bold]" if comparison["passed"] else "[bold red]NOT passed[/]")
