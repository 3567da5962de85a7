"""Counts and checksums per archive partition, on the Parquet side.

A row's fingerprint is the first 60 bits of the sha256 of all its columns as
text, joined by '|' (NULL as \\N, timestamps as microseconds since 1970, the
body as its sha256); a partition's checksum is the sum of its rows'
fingerprints. The named queries pipeline_archive_message_checksums and
pipeline_archive_history_checksums compute exactly the same in PostgreSQL,
so a copy verifies only if every column of every row arrived unchanged.

Columns added to the archive later (deliver_at, trace_context; see
archive_layout.py) enter the fingerprint as 'name=value', and only when not
NULL: a row without them, such as every row archived before they existed,
keeps the fingerprint it had then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from coordinator.pipeline.archive_layout import HISTORY, MESSAGES, PARTITION_COLUMNS

NULL_TEXT = "\\N"


@dataclass(frozen=True, order=True)
class PartitionKey:
    born_date: date
    topic: str

    def label(self) -> str:
        return f"born_date={self.born_date.isoformat()}/topic={self.topic}"


@dataclass(frozen=True)
class PartitionSum:
    rows: int
    checksum: int


def _text(name: str) -> Column:
    return F.coalesce(F.col(name).cast("string"), F.lit(NULL_TEXT))


def _micros(name: str) -> Column:
    return F.coalesce(F.unix_micros(F.col(name)).cast("string"), F.lit(NULL_TEXT))


def _added(name: str, value: Column) -> Column:
    # NULL when the value is (concat is NULL then), and concat_ws skips NULLs.
    return F.concat(F.lit(f"{name}="), value)


def _fingerprint(*parts: Column) -> Column:
    digest = F.sha2(F.concat_ws("|", *parts), 256)
    return F.conv(F.substring(digest, 1, 15), 16, 10).cast("decimal(38,0)")


def message_fingerprint() -> Column:
    immunity_micros = F.round(F.col("check_immunity_seconds") * F.lit(1_000_000.0)).cast("bigint")
    return _fingerprint(
        _text("id"),
        F.col("message_id"),
        _text("transaction_id"),
        F.col("kind"),
        _text("producer_group"),
        F.col("topic"),
        _text("tags"),
        F.array_join(F.col("keys"), ","),
        _text("message_group"),
        F.sha2(F.col("body"), 256),
        F.col("properties"),
        F.col("state"),
        _text("check_count"),
        F.coalesce(immunity_micros.cast("string"), F.lit(NULL_TEXT)),
        _micros("born_at"),
        _micros("next_check_at"),
        _micros("resolved_at"),
        _text("resolution_source"),
        _added("deliver_at", F.unix_micros(F.col("deliver_at")).cast("string")),
        _added("trace_context", F.col("trace_context")),
    )


def history_fingerprint() -> Column:
    return _fingerprint(
        _text("id"),
        _text("message_offset"),
        _micros("at"),
        F.col("source"),
        _text("from_state"),
        F.col("to_state"),
        _text("detail"),
    )


_FINGERPRINTS = {MESSAGES: message_fingerprint, HISTORY: history_fingerprint}


def partition_sums(rows: DataFrame, table: str) -> dict[PartitionKey, PartitionSum]:
    """Rows and checksum per (born_date, topic) of an archived table's DataFrame."""
    summary = rows.groupBy(*PARTITION_COLUMNS).agg(
        F.count(F.lit(1)).alias("rows"), F.sum(_FINGERPRINTS[table]()).alias("checksum")
    )
    return {
        PartitionKey(r["born_date"], r["topic"]): PartitionSum(int(r["rows"]), int(r["checksum"]))
        for r in summary.collect()
    }
