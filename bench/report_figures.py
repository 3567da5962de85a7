"""The lifecycle report's figures against SQL's, and two reports against each other.

The benchmark (bench/pipeline_report.py) compares every figure before it
prints a time, and the pipeline's tests hold reports to SQL and to each
other: both with these functions. SQL's figures are the named queries of
report_figures.sql: pipeline_report_reference (per hour), ..._totals (per
producer group and topic) and ..._checks (the check-count distribution).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq

from coordinator.db.queries import parse_queries
from coordinator.pipeline.figures import STATES

REFERENCE_SQL = parse_queries((Path(__file__).parent / "report_figures.sql").read_text())
# The columns of the reference queries after their keys, by name.
REFERENCE_COLUMNS = (
    "messages",
    *STATES,
    "latency",  # [p50, p90, p99], NULL when nothing was resolved by its producer or a check
    "checked",
    "check_count_mean",
    "check_count_max",
    "discard_rate",
    "expiry_rate",
    "pending_age_p50_s",
    "pending_age_max_s",
)
HOURLY_KEYS = ("producer_group", "topic", "hour")
TOTAL_KEYS = ("producer_group", "topic")
CHECK_KEYS = ("producer_group", "topic", "hour", "check_count")
# The report's datasets with figures, and the keys of their rows.
DATASETS = (
    ("figures_hourly", HOURLY_KEYS),
    ("figures_total", TOTAL_KEYS),
    ("check_counts", CHECK_KEYS),
)

Rows = dict[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class SqlFigures:
    seconds: float  # what the three queries took
    hourly: Rows
    totals: Rows
    checks: dict[tuple[Any, ...], int]


def _by_key(rows: list[tuple[Any, ...]], keys: int) -> Rows:
    found = {}
    for row in rows:
        figures = dict(zip(REFERENCE_COLUMNS, row[keys:], strict=True))
        latency = figures.pop("latency") or [None, None, None]
        names = ("latency_p50_s", "latency_p90_s", "latency_p99_s")
        figures.update(zip(names, latency, strict=True))
        found[tuple(row[:keys])] = figures
    return found


def sql_figures(url: str, as_of: datetime) -> SqlFigures:
    """The report's figures as PostgreSQL computes them, timed."""
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        hourly = conn.execute(
            REFERENCE_SQL["pipeline_report_reference"], {"as_of": as_of}
        ).fetchall()
        totals = conn.execute(
            REFERENCE_SQL["pipeline_report_reference_totals"], {"as_of": as_of}
        ).fetchall()
        checks = conn.execute(REFERENCE_SQL["pipeline_report_reference_checks"]).fetchall()
    seconds = time.perf_counter() - started
    return SqlFigures(
        seconds,
        _by_key(hourly, len(HOURLY_KEYS)),
        _by_key(totals, len(TOTAL_KEYS)),
        {(g, t, h, c): n for g, t, h, c, n in checks},
    )


def naive_utc(value: Any) -> Any:
    """Parquet gives aware UTC times, SQL's date_trunc of a UTC wall time naive ones:
    both compare as naive UTC."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def same_figure(actual: Any, expected: Any) -> bool:
    """Equal, floats to within what their different order of summing changes."""
    if actual is None or expected is None:
        return actual is None and expected is None
    if isinstance(actual, float) or isinstance(expected, float):
        return math.isclose(float(actual), float(expected), rel_tol=1e-9, abs_tol=1e-6)
    return bool(actual == expected)


def dataset_rows(path: Path, keys: tuple[str, ...]) -> Rows:
    """A report dataset's rows by their keys (times as naive UTC); each key once."""
    rows = pq.read_table(path).to_pylist()
    found = {tuple(naive_utc(row[k]) for k in keys): row for row in rows}
    assert len(found) == len(rows), f"{path}: duplicate keys"
    return found


def _assert_same_rows(name: str, found: Rows, expected: Rows) -> int:
    assert found.keys() == expected.keys(), f"{name}: not the same rows"
    compared = 0
    for key, figures in expected.items():
        wrong = {
            c: (found[key].get(c), v)
            for c, v in figures.items()
            if not same_figure(found[key].get(c), v)
        }
        assert not wrong, f"{name} {key}: {wrong}"
        compared += len(figures)
    return compared


def assert_equal_figures(out: Path, sql: SqlFigures) -> int:
    """Every figure of the report in `out` against SQL's; the number compared."""
    compared = _assert_same_rows(
        "figures_hourly", dataset_rows(out / "figures_hourly", HOURLY_KEYS), sql.hourly
    )
    compared += _assert_same_rows(
        "figures_total", dataset_rows(out / "figures_total", TOTAL_KEYS), sql.totals
    )
    checks = {k: r["messages"] for k, r in dataset_rows(out / "check_counts", CHECK_KEYS).items()}
    assert checks == sql.checks, "check_counts: not SQL's"
    return compared + len(checks)


def assert_same_datasets(actual: Path, expected: Path) -> None:
    """Two reports: the same rows with the same columns and values in every dataset."""
    for dataset, keys in DATASETS:
        mine, theirs = dataset_rows(actual / dataset, keys), dataset_rows(expected / dataset, keys)
        for key, row in mine.items():
            assert row.keys() == theirs.get(key, row).keys(), f"{dataset} {key}: other columns"
        _assert_same_rows(dataset, mine, theirs)
