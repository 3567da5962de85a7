"""The report's HTML page: headline numbers, the charts, and the tables behind them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

MAX_TABLE_ROWS = 200

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 1200px; }
h1 { margin-bottom: 0.2rem; } .sub { color: #666; margin-top: 0; }
.cards { display: flex; gap: 1rem; flex-wrap: wrap; margin: 1.5rem 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.8rem 1.2rem; min-width: 9rem; }
.card b { display: block; font-size: 1.6rem; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0 1.5rem; }
table { border-collapse: collapse; font-size: 0.85rem; margin-bottom: 2rem; }
th, td { border-bottom: 1px solid #e5e5e5; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child, th:nth-child(2), td:nth-child(2) { text-align: left; }
th { background: #f5f5f5; }
"""


def display_value(value: Any, *, decimals: int) -> str:
    """A figure as people read it: thousands separated, times to the second, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{decimals}f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def _cell(value: Any) -> str:
    return escape(display_value(value, decimals=3))


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "<p>None.</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(row.get(c))}</td>" for c in columns) + "</tr>"
        for row in rows[:MAX_TABLE_ROWS]
    )
    more = (
        f"<p>First {MAX_TABLE_ROWS} of {len(rows):,} rows; all are in the Parquet output.</p>"
        if len(rows) > MAX_TABLE_ROWS
        else ""
    )
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def render(
    *,
    as_of: datetime,
    sources: str,
    headline: Mapping[str, str],
    charts: Sequence[tuple[str, Path]],
    totals: Sequence[Mapping[str, Any]],
    total_columns: Sequence[str],
    lag: Sequence[Mapping[str, Any]] | None,
    lag_columns: Sequence[str],
    datasets: Sequence[str],
    relative_to: Path,
) -> str:
    cards = "".join(
        f'<div class="card">{escape(name)}<b>{escape(value)}</b></div>'
        for name, value in headline.items()
    )
    images = "".join(
        f'<h3>{escape(title)}</h3><img src="{escape(path.relative_to(relative_to).as_posix())}" '
        f'alt="{escape(title)}">'
        for title, path in charts
    )
    lag_section = (
        _table(lag, lag_columns)
        if lag is not None
        else "<p>No consumer_lag view in this database (delivery not migrated).</p>"
    )
    files = "".join(f"<li><code>{escape(d)}/</code></li>" for d in datasets)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Transaction lifecycle report, {as_of:%Y-%m-%d %H:%M} UTC</title>
<style>{_STYLE}</style></head>
<body>
<h1>Transaction lifecycle report</h1>
<p class="sub">As of {as_of:%Y-%m-%d %H:%M:%S} UTC &middot; {escape(sources)}</p>
<div class="cards">{cards}</div>
<h2>Charts</h2>
{images}
<h2>By producer group and topic</h2>
<p>Latency: seconds from prepare to the producer's commit or rollback.
Rates: share of all the group's half messages. Pending ages: seconds since birth
of the still prepared ones.</p>
{_table(totals, total_columns)}
<h2>Consumer lag</h2>
{lag_section}
<h2>Data</h2>
<p>Parquet datasets next to this page (per producer group, topic and hour):</p>
<ul>{files}</ul>
</body></html>
"""
