"""The coordinator's tables as Spark DataFrames: live in PostgreSQL, archived in Parquet.

Live tables are read through the coordinator_postgres data source, split into
ranges of the message offset. The archive (written by `coordinator pipeline
archive`) is a Parquet dataset per table under one directory, partitioned by
the message's birth date (UTC) and topic:

    ARCHIVE/messages/born_date=2026-11-19/topic=orders/run-<run>-part-....parquet
    ARCHIVE/history/born_date=2026-11-19/topic=orders/run-<run>-part-....parquet
    ARCHIVE/_runs/<run>.json          one manifest per archive run
    ARCHIVE/_staging/<run>/...        a run's copy before it is verified and published

Readers ask for the current schemas below: a column a file lacks (one
written before the column was added, see archive_layout.py) reads as null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from coordinator.db.queries import query
from coordinator.pipeline.archive_layout import HISTORY, MESSAGES, day_dir
from coordinator.pipeline.source import FORMAT


def _schema(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])


ARCHIVED_MESSAGES_SCHEMA = _schema(
    ("id", LongType()),
    ("message_id", StringType()),
    ("transaction_id", StringType()),
    ("kind", StringType()),
    ("producer_group", StringType()),
    ("tags", StringType()),
    ("keys", ArrayType(StringType())),
    ("message_group", StringType()),
    ("body", BinaryType()),
    ("properties", StringType()),
    ("state", StringType()),
    ("check_count", IntegerType()),
    ("check_immunity_seconds", DoubleType()),
    ("born_at", TimestampType()),
    ("next_check_at", TimestampType()),
    ("resolved_at", TimestampType()),
    ("resolution_source", StringType()),
    ("deliver_at", TimestampType()),
    ("trace_context", StringType()),
    ("born_date", DateType()),
    ("topic", StringType()),
)
ARCHIVED_HISTORY_SCHEMA = _schema(
    ("id", LongType()),
    ("message_offset", LongType()),
    ("at", TimestampType()),
    ("source", StringType()),
    ("from_state", StringType()),
    ("to_state", StringType()),
    ("detail", StringType()),
    ("born_date", DateType()),
    ("topic", StringType()),
)
_ARCHIVE_SCHEMAS = {MESSAGES: ARCHIVED_MESSAGES_SCHEMA, HISTORY: ARCHIVED_HISTORY_SCHEMA}


def read_postgres(
    spark: SparkSession,
    url: str,
    sql_text: str,
    *,
    params: Mapping[str, Any] | None = None,
    partition_column: str | None = None,
    hash_partition_column: str | None = None,
    partitions: int = 1,
) -> DataFrame:
    """A query as a DataFrame, read by `partitions` tasks.

    The tasks split the query by ranges of an integer partition_column, or by
    a hash of any hash_partition_column; without either, one task reads it.
    """
    split = partition_column or hash_partition_column
    reader = (
        spark.read.format(FORMAT)
        .option("url", url)
        .option("query", sql_text)
        .option("num_partitions", partitions if split else 1)
    )
    if params:
        reader = reader.option("params", json.dumps(dict(params), default=str))
    if partition_column:
        reader = reader.option("partition_column", partition_column)
    elif hash_partition_column:
        reader = reader.option("hash_partition_column", hash_partition_column)
    return reader.load()


def read_named(
    spark: SparkSession,
    url: str,
    name: str,
    *,
    params: Mapping[str, Any] | None = None,
    partition_column: str | None = None,
    partitions: int = 1,
) -> DataFrame:
    """A named query (coordinator/db/sql/queries/) as a DataFrame."""
    return read_postgres(
        spark,
        url,
        query(name),
        params=params,
        partition_column=partition_column,
        partitions=partitions,
    )


def read_parquet_dataset(spark: SparkSession, root: Path, table: str) -> DataFrame:
    """One table of an archive (or a run's staging copy); empty when there is none yet."""
    schema = _ARCHIVE_SCHEMAS[table]
    path = root / table
    if not any(path.glob("*=*/*=*/*.parquet")):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", str(path)).parquet(str(path))


def read_archive_days(spark: SparkSession, root: Path, table: str, days: list[str]) -> DataFrame:
    """Only these birth dates' partitions of an archive table: Spark lists and opens no other."""
    schema = _ARCHIVE_SCHEMAS[table]
    path = root / table
    chosen = [day_dir(root, table, day) for day in days]
    present = [str(p) for p in chosen if any(p.glob("*=*/*.parquet"))]
    if not present:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", str(path)).parquet(*present)


def with_archived(live: DataFrame, archived: DataFrame) -> DataFrame:
    """Live rows plus archived ones, each offset once (live wins).

    A message is in both places only between an archive run's publish and
    delete steps (or when a run kept it): it is counted once either way.
    """
    columns = live.columns
    archived_only = archived.select(*columns).join(live.select("id"), on="id", how="left_anti")
    return live.unionByName(archived_only)


def utc_wall_clock(rows: DataFrame) -> DataFrame:
    """Timestamps as UTC wall-clock times, for rows collected to show to people.

    Spark hands TIMESTAMP values to Python in the machine's time zone; cast to
    TIMESTAMP_NTZ (in the UTC session) they arrive as the UTC time, unshifted.
    """
    return rows.select(
        *(
            F.col(f.name).cast(TimestampNTZType()).alias(f.name)
            if isinstance(f.dataType, TimestampType)
            else F.col(f.name)
            for f in rows.schema.fields
        )
    )


def transactional_archive(archived: DataFrame) -> DataFrame:
    return archived.where(F.col("kind") == "transactional")
