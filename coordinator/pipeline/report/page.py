"""The report's HTML page: headline numbers, the charts, and the tables behind them.

The page fits its width: the figures per producer group and topic are two
tables of ten columns or fewer (counts by state; latency, check-backs, rates
and ages), with times and shares in the units people read them in. Exact
values are in each cell's tooltip and in the Parquet datasets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

from coordinator.pipeline.display import display_value

MAX_TABLE_ROWS = 200

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; padding: 0 1rem; color: #222;
       max-width: 1200px; }
h1 { margin-bottom: 0.2rem; } .sub { color: #666; margin-top: 0; }
.cards { display: flex; gap: 1rem; flex-wrap: wrap; margin: 1.5rem 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.8rem 1.2rem; min-width: 9rem; }
.card b { display: block; font-size: 1.6rem; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0 1.5rem; }
/* A table wider than a very narrow window scrolls in its box, never the page. */
.table-box { overflow-x: auto; margin-bottom: 2rem; }
table { border-collapse: collapse; font-size: 0.85rem; width: 100%; }
th, td { border-bottom: 1px solid #e5e5e5; padding: 0.3rem 0.5rem; text-align: right; }
th { background: #f5f5f5; vertical-align: bottom; font-weight: 600; }
td { white-space: nowrap; font-variant-numeric: tabular-nums; }
/* Names are the users' own and can be long: they wrap (anywhere, if they must), the
   figures do not. */
th.name, td.name { text-align: left; }
td.name { white-space: normal; overflow-wrap: anywhere; min-width: 5rem; }
@media (max-width: 900px) {
  body { margin: 1rem auto; }
  table { font-size: 0.8rem; }
  th, td { padding: 0.3rem 0.3rem; }
}
"""


def duration(seconds: float | None) -> str:
    """Seconds in the unit people read them in: 10 ms, 2.15 s, 3.2 min, 30.5 h, 4.2 d."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size:
            amount = seconds / size
            return f"{amount:,.0f} {unit}" if amount >= 100 else f"{amount:.3g} {unit}"
    return f"{seconds * 1000:.3g} ms" if seconds > 0 else "0 s"


def share(rate: float | None) -> str:
    """A share of all messages as a percentage."""
    return "-" if rate is None else f"{rate * 100:.2f} %"


def _exact_seconds(seconds: float) -> str:
    return f"{seconds:,.6f} s"


def _exact_share(rate: float) -> str:
    return f"{rate * 100:.6f} %"


def _number(value: Any) -> str:
    return display_value(value, decimals=3)


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    show: Callable[[Any], str] = _number
    exact: Callable[[Any], str] | None = None  # the tooltip of a rounded figure
    name: bool = False  # a name (group, topic): left-aligned, may wrap

    def cell(self, row: Mapping[str, Any]) -> str:
        value = row.get(self.key)
        tooltip = (
            f' title="{escape(self.exact(value))}"' if self.exact and value is not None else ""
        )
        css = ' class="name"' if self.name else ""
        return f"<td{css}{tooltip}>{escape(self.show(value))}</td>"

    def header(self) -> str:
        css = ' class="name"' if self.name else ""
        return f"<th{css}>{escape(self.label)}</th>"


GROUP_TOPIC = (
    Column("producer_group", "producer group", name=True),
    Column("topic", "topic", name=True),
)
COUNT_COLUMNS = (
    *GROUP_TOPIC,
    Column("messages", "messages"),
    Column("committed", "committed"),
    Column("rolled_back", "rolled back"),
    Column("discarded", "discarded"),
    Column("expired", "expired"),
    Column("prepared", "pending"),
)
TIMING_COLUMNS = (
    *GROUP_TOPIC,
    Column("latency_p50_s", "latency p50", duration, _exact_seconds),
    Column("latency_p90_s", "latency p90", duration, _exact_seconds),
    Column("latency_p99_s", "latency p99", duration, _exact_seconds),
    Column("checked", "checked"),
    Column("check_count_max", "most check-backs"),
    Column("discard_rate", "discard rate", share, _exact_share),
    Column("expiry_rate", "expiry rate", share, _exact_share),
    Column("pending_age_max_s", "oldest pending", duration, _exact_seconds),
)
LAG_COLUMNS = (
    Column("consumer_group", "consumer group", name=True),
    Column("topic", "topic", name=True),
    Column("lag", "lag"),
    Column("in_flight", "in flight"),
    Column("dead_letters", "dead letters"),
    Column("oldest_pending_at", "oldest pending (UTC)"),
)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    if not rows:
        return "<p>None.</p>"
    head = "".join(c.header() for c in columns)
    body = "".join(
        "<tr>" + "".join(c.cell(row) for c in columns) + "</tr>" for row in rows[:MAX_TABLE_ROWS]
    )
    more = (
        f"<p>First {MAX_TABLE_ROWS} of {len(rows):,} rows; all are in the Parquet output.</p>"
        if len(rows) > MAX_TABLE_ROWS
        else ""
    )
    return f'<div class="table-box"><table><tr>{head}</tr>{body}</table></div>{more}'


def render(
    *,
    as_of: datetime,
    sources: str,
    headline: Mapping[str, str],
    charts: Sequence[tuple[str, Path]],
    totals: Sequence[Mapping[str, Any]],
    lag: Sequence[Mapping[str, Any]] | None,
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
        table(lag, LAG_COLUMNS)
        if lag is not None
        else "<p>No consumer_lag view in this database (delivery not migrated).</p>"
    )
    files = "".join(f"<li><code>{escape(d)}/</code></li>" for d in datasets)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Transaction lifecycle report, {as_of:%Y-%m-%d %H:%M} UTC</title>
<style>{_STYLE}</style></head>
<body>
<h1>Transaction lifecycle report</h1>
<p class="sub">As of {as_of:%Y-%m-%d %H:%M:%S} UTC &middot; {escape(sources)}</p>
<div class="cards">{cards}</div>
<h2>Charts</h2>
{images}
<h2>By producer group and topic</h2>
<h3>Half messages by state</h3>
<p>Every half message born, by the state it is in now; pending: still prepared.</p>
{table(totals, COUNT_COLUMNS)}
<h3>Latency, check-backs, rates and pending ages</h3>
<p>Latency: time from prepare to the producer's commit or rollback (p50, p90,
p99). Checked: messages checked back at least once. Rates: share of all the
group's half messages. Oldest pending: age of the oldest still prepared one.
Hover a figure for its exact value.</p>
{table(totals, TIMING_COLUMNS)}
<h2>Consumer lag</h2>
{lag_section}
<h2>Data</h2>
<p>Parquet datasets next to this page (per producer group, topic and hour):</p>
<ul>{files}</ul>
</body></html>
"""
