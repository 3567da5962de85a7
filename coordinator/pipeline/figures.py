"""The lifecycle figures, from one row per half message, in two steps.

Input columns: id, producer_group, topic, state, check_count, born_at,
resolved_at (and `from_archive`, which says where a row was read). The same
figures as SQL are the named queries `pipeline_report_reference` (per hour),
`pipeline_report_reference_totals` and `pipeline_report_reference_checks`
of bench/report_figures.sql; the tests hold the two to each other.

1. Over the rows, in parallel slices (`reduce_rows`: in Spark's Python
   workers, report/spark.py, or in threads of the command, report/arrow.py):
   per producer group, topic, hour of birth (UTC) and check count, the
   counts by state and the values the percentiles need, the latencies and
   the birth times of the still prepared messages (8 bytes per message,
   no strings).
2. The driver (`compact`, then `rollup`, numpy on those few rows): figures per hour, in
   total per producer group and topic, and the check-count distribution.
   Partials of hours that can no longer change are what the incremental
   report keeps (report/state.py): their rollup needs no row again.

The figures:

- counts by state: prepared, committed, rolled_back, discarded, expired
- latency: seconds from prepare (born_at) to resolution (resolved_at) of the
  messages their producer resolved (committed or rolled back; a discard or an
  expiry is the coordinator giving up, reported as rates instead), p50, p90
  and p99, exact (linear interpolation, computed as PostgreSQL's
  percentile_cont computes it)
- check-backs: messages checked at least once, mean and maximum check count,
  and the distribution (messages per check count)
- discard_rate, expiry_rate: discarded (expired) messages / all messages
- pending ages: seconds from born_at to `as_of` of the still prepared
  messages, p50 and maximum
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

STATES = ("prepared", "committed", "rolled_back", "discarded", "expired")
PRODUCER_RESOLVED = ("committed", "rolled_back")
HOURLY_KEYS = ("producer_group", "topic", "hour")
TOTAL_KEYS = ("producer_group", "topic")
PERCENTILES = (0.5, 0.9, 0.99)
HOUR_US = 3_600_000_000
FROM_ARCHIVE = "from_archive"

# What step 1 hands the driver: one row per producer group, topic, hour and
# check count (and slice). The lists are unordered.
PARTIALS_SCHEMA = pa.schema(
    [
        ("producer_group", pa.string()),
        ("topic", pa.string()),
        ("hour_us", pa.int64()),
        ("check_count", pa.int32()),
        ("messages", pa.int64()),
        *((state, pa.int64()) for state in STATES),
        ("archive_rows", pa.int64()),
        ("latencies_us", pa.list_(pa.int64())),
        ("pending_born_us", pa.list_(pa.int64())),
    ]
)
PARTIAL_KEYS = ("producer_group", "topic", "hour_us", "check_count")

UTC_HOUR = pa.timestamp("us", tz="UTC")
_FIGURE_FIELDS = [
    ("messages", pa.int64()),
    *((state, pa.int64()) for state in STATES),
    ("latency_p50_s", pa.float64()),
    ("latency_p90_s", pa.float64()),
    ("latency_p99_s", pa.float64()),
    ("checked", pa.int64()),
    ("check_count_mean", pa.float64()),
    ("check_count_max", pa.int32()),
    ("discard_rate", pa.float64()),
    ("expiry_rate", pa.float64()),
    ("pending_age_p50_s", pa.float64()),
    ("pending_age_max_s", pa.float64()),
]
HOURLY_SCHEMA = pa.schema(
    [("producer_group", pa.string()), ("topic", pa.string()), ("hour", UTC_HOUR), *_FIGURE_FIELDS]
)
TOTAL_SCHEMA = pa.schema([("producer_group", pa.string()), ("topic", pa.string()), *_FIGURE_FIELDS])
CHECKS_SCHEMA = pa.schema(
    [
        ("producer_group", pa.string()),
        ("topic", pa.string()),
        ("hour", UTC_HOUR),
        ("check_count", pa.int32()),
        ("messages", pa.int64()),
    ]
)


def epoch_micros(moment: datetime) -> int:
    """Exact microseconds since 1970 of an aware datetime (no float rounding)."""
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def hour_start(micros: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


INPUT_COLUMNS = ("producer_group", "topic", "state", "check_count", "born_at", "resolved_at")


def _micros(column: pa.ChunkedArray) -> np.ndarray:
    return pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False)


def _without_nulls(lists: pa.ChunkedArray) -> pa.ListArray:
    """Each list of a list column with its null elements left out."""
    array = lists.combine_chunks()
    offsets = array.offsets.to_numpy()
    values = array.values  # the whole child array: offsets index into it
    valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
    kept_before = np.concatenate([[0], np.cumsum(valid, dtype=np.int64)])
    return pa.ListArray.from_arrays(
        pa.array(kept_before[offsets], pa.int32()), values.filter(pa.array(valid))
    )


def reduce_rows(rows: pa.Table) -> pa.Table:
    """The partials of some half messages (one row each, INPUT_COLUMNS and FROM_ARCHIVE)."""
    if rows.num_rows == 0:
        return empty_partials()
    born = _micros(rows.column("born_at"))
    state = rows.column("state")
    resolved_by_producer = pc.is_in(state, value_set=pa.array(PRODUCER_RESOLVED))
    latency = pc.subtract(pc.cast(rows.column("resolved_at"), pa.int64()), pa.array(born))
    columns: dict[str, Any] = {
        "producer_group": rows.column("producer_group"),
        "topic": rows.column("topic"),
        # the hour by arithmetic on UTC microseconds (numpy's % floors): whatever the zone
        "hour_us": born - born % HOUR_US,
        "check_count": rows.column("check_count"),
        "messages": np.ones(rows.num_rows, dtype=np.int64),
        **{s: pc.cast(pc.equal(state, s), pa.int64()) for s in STATES},
        "archive_rows": pc.cast(rows.column(FROM_ARCHIVE), pa.int64()),
        "latency": pc.if_else(resolved_by_producer, latency, None),
        "pending": pc.if_else(pc.equal(state, "prepared"), pa.array(born), None),
    }
    sums = ("messages", *STATES, "archive_rows")
    grouped = (
        pa.table(columns)
        .group_by(list(PARTIAL_KEYS), use_threads=False)
        .aggregate([*((name, "sum") for name in sums), ("latency", "list"), ("pending", "list")])
    )
    return pa.table(
        {
            **{key: grouped.column(key) for key in PARTIAL_KEYS},
            **{name: grouped.column(f"{name}_sum") for name in sums},
            "latencies_us": _without_nulls(grouped.column("latency_list")),
            "pending_born_us": _without_nulls(grouped.column("pending_list")),
        }
    ).cast(PARTIALS_SCHEMA)


def compact(rows: pa.Table) -> pa.Table:
    """One row per key, in key order: the sums added up, the lists joined."""
    if rows.num_rows == 0:
        return empty_partials()
    table = rows.sort_by([(key, "ascending") for key in PARTIAL_KEYS])
    starts = _starts([table.column(key) for key in PARTIAL_KEYS], table.num_rows)
    bounds = np.append(starts, table.num_rows)
    first = table.take(pa.array(starts, pa.int64()))
    columns: dict[str, Any] = {key: first.column(key) for key in PARTIAL_KEYS}
    for name in ("messages", *STATES, "archive_rows"):
        columns[name] = np.add.reduceat(table.column(name).to_numpy(), starts)
    for name in ("latencies_us", "pending_born_us"):
        # the sort wrote each column's lists anew, in row order: a key's rows'
        # values are one stretch of the child array
        lists = table.column(name).combine_chunks()
        offsets = lists.offsets.to_numpy()
        columns[name] = pa.ListArray.from_arrays(
            pa.array(offsets[bounds], pa.int32()), lists.values
        )
    return pa.table(columns).cast(PARTIALS_SCHEMA)


def empty_partials() -> pa.Table:
    return PARTIALS_SCHEMA.empty_table()


def percentiles(values: np.ndarray, fractions: Sequence[float]) -> list[float | None]:
    """Exact percentiles of float values as PostgreSQL's percentile_cont computes them."""
    count = len(values)
    if count == 0:
        return [None] * len(fractions)
    positions = [fraction * (count - 1) for fraction in fractions]
    ranks = sorted({math.floor(p) for p in positions} | {math.ceil(p) for p in positions})
    ordered = np.partition(values, ranks)
    found: list[float | None] = []
    for position in positions:
        low, high = math.floor(position), math.ceil(position)
        first, second = float(ordered[low]), float(ordered[high])
        # percentile_cont's float8_lerp, operation for operation
        found.append(first if low == high else first + (position - low) * (second - first))
    return found


@dataclass(frozen=True)
class Rollup:
    hourly: pa.Table  # HOURLY_SCHEMA
    totals: pa.Table  # TOTAL_SCHEMA
    checks: pa.Table  # CHECKS_SCHEMA


def _starts(columns: Sequence[pa.ChunkedArray | pa.Array], rows: int) -> np.ndarray:
    """Where a new key begins in (at least one) rows sorted by these columns."""
    change = np.zeros(rows, dtype=bool)
    change[0] = True
    for column in columns:
        codes = pc.dictionary_encode(column).combine_chunks().indices
        values = codes.to_numpy(zero_copy_only=False)
        change[1:] |= values[1:] != values[:-1]
    return np.flatnonzero(change)


def _list_parts(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (offsets, flat values): row i's values are flat[off[i]:off[i+1]]."""
    array = column.combine_chunks()
    offsets = array.offsets.to_numpy()
    flat = array.flatten().to_numpy(zero_copy_only=False)
    return offsets - offsets[0], flat


def _figures(
    table: pa.Table, starts: np.ndarray, as_of_us: int
) -> dict[str, Sequence[object] | np.ndarray]:
    """The figure columns of each run of rows beginning at `starts` (a sorted table)."""
    ends = np.append(starts[1:], table.num_rows)
    counts = {
        name: np.add.reduceat(table.column(name).to_numpy(), starts)
        for name in ("messages", *STATES)
    }
    check_count = table.column("check_count").to_numpy().astype(np.int64)
    messages_per_row = table.column("messages").to_numpy()
    checked = np.add.reduceat(messages_per_row * (check_count > 0), starts)
    check_sum = np.add.reduceat(messages_per_row * check_count, starts)
    check_max = np.maximum.reduceat(check_count, starts)
    latency_offsets, latencies = _list_parts(table.column("latencies_us"))
    pending_offsets, births = _list_parts(table.column("pending_born_us"))
    latency_seconds = latencies / 1e6
    pending_ages = (as_of_us - births) / 1e6
    latency_columns: list[list[float | None]] = [[], [], []]
    pending_p50: list[float | None] = []
    pending_max: list[float | None] = []
    for start, end in zip(starts, ends, strict=True):
        window = latency_seconds[latency_offsets[start] : latency_offsets[end]]
        for column, value in zip(latency_columns, percentiles(window, PERCENTILES), strict=True):
            column.append(value)
        ages = pending_ages[pending_offsets[start] : pending_offsets[end]]
        pending_p50.append(percentiles(ages, (0.5,))[0])
        pending_max.append(float(ages.max()) if len(ages) else None)
    messages = counts["messages"]
    return {
        **counts,
        "latency_p50_s": latency_columns[0],
        "latency_p90_s": latency_columns[1],
        "latency_p99_s": latency_columns[2],
        "checked": checked,
        # exact integers divided once: what PostgreSQL's avg()::float8 rounds to
        "check_count_mean": [int(s) / int(m) for s, m in zip(check_sum, messages, strict=True)],
        "check_count_max": check_max,
        "discard_rate": [
            int(d) / int(m) for d, m in zip(counts["discarded"], messages, strict=True)
        ],
        "expiry_rate": [int(e) / int(m) for e, m in zip(counts["expired"], messages, strict=True)],
        "pending_age_p50_s": pending_p50,
        "pending_age_max_s": pending_max,
    }


def _hours(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.cast(column, pa.int64()).cast(UTC_HOUR)


def rollup(partial_rows: pa.Table, as_of: datetime) -> Rollup:
    """Step 2, in the driver: every figure from the partials (of all hours reported)."""
    if partial_rows.num_rows == 0:
        return Rollup(
            HOURLY_SCHEMA.empty_table(), TOTAL_SCHEMA.empty_table(), CHECKS_SCHEMA.empty_table()
        )
    table = partial_rows.sort_by([(key, "ascending") for key in PARTIAL_KEYS])
    as_of_us = epoch_micros(as_of)
    by_hour = _starts([table.column(k) for k in PARTIAL_KEYS[:3]], table.num_rows)
    first_of_hour = table.take(pa.array(by_hour, type=pa.int64()))
    hourly = pa.table(
        {
            "producer_group": first_of_hour.column("producer_group"),
            "topic": first_of_hour.column("topic"),
            "hour": _hours(first_of_hour.column("hour_us")),
            **_figures(table, by_hour, as_of_us),
        },
        schema=HOURLY_SCHEMA,
    )
    # Totals: every value of a producer group and topic is contiguous in the
    # sorted rows, so each is one slice of the flat lists.
    by_pair = _starts([table.column(k) for k in PARTIAL_KEYS[:2]], table.num_rows)
    first_of_pair = table.take(pa.array(by_pair, type=pa.int64()))
    totals = pa.table(
        {
            "producer_group": first_of_pair.column("producer_group"),
            "topic": first_of_pair.column("topic"),
            **_figures(table, by_pair, as_of_us),
        },
        schema=TOTAL_SCHEMA,
    )
    checks = pa.table(
        {
            "producer_group": table.column("producer_group"),
            "topic": table.column("topic"),
            "hour": _hours(table.column("hour_us")),
            "check_count": table.column("check_count"),
            "messages": table.column("messages"),
        },
        schema=CHECKS_SCHEMA,
    )
    return Rollup(hourly=hourly, totals=totals, checks=checks)
