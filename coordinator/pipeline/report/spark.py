"""The report's input read and reduced by Spark: one job over the executors.

PostgreSQL is read by the coordinator_postgres data source in ranges of the
message offset, the archive's birth-date partitions by Spark's Parquet
reader; each partition is reduced to partial figures in its Python worker
(figures.reduce_rows, Arrow in and out, no shuffle), and the driver gets one
row per producer group, topic, hour, check count and partition.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from coordinator.pipeline.figures import (
    FROM_ARCHIVE,
    INPUT_COLUMNS,
    PARTIALS_SCHEMA,
    compact,
    epoch_micros,
    reduce_rows,
)
from coordinator.pipeline.report.input import BirthRanges, ReportInput
from coordinator.pipeline.tables import (
    MESSAGES,
    read_archive_days,
    read_named,
    read_parquet_dataset,
    transactional_archive,
)


def _born_in(ranges: BirthRanges) -> Column:
    condition = F.lit(False)
    for start, end in ranges:
        within = F.col("born_at") >= F.timestamp_micros(F.lit(epoch_micros(start)))
        if end is not None:
            within &= F.col("born_at") < F.timestamp_micros(F.lit(epoch_micros(end)))
        condition |= within
    return condition


def _with_archive(live: DataFrame, archived: DataFrame, source: ReportInput) -> DataFrame:
    """Live rows plus archived ones, each offset once (live wins).

    Only the files of an archive run not done can hold a message PostgreSQL
    still has (input.overlapping_runs): only their rows are checked
    against the live offsets (a second read of PostgreSQL, which most runs
    never need).
    """
    live = live.withColumn(FROM_ARCHIVE, F.lit(False))
    archived = archived.select(*live.columns[:-1]).withColumn(FROM_ARCHIVE, F.lit(True))
    if not source.overlapping_runs:
        return live.unionByName(archived)
    in_flight = F.lit(False)
    for mark in source.overlapping_marks:
        in_flight |= F.input_file_name().contains(mark)
    settled = archived.where(~in_flight)
    maybe_live = archived.where(in_flight).join(live.select("id"), on="id", how="left_anti")
    return live.unionByName(settled).unionByName(maybe_live)


def messages(spark: SparkSession, source: ReportInput, partitions: int) -> DataFrame:
    """The half messages to report, live and archived, each offset once."""
    live = read_named(
        spark,
        source.url,
        source.query_name,
        params=source.params,
        partition_column="id",
        partitions=partitions,
    )
    if source.archive_dir is None:
        return live.withColumn(FROM_ARCHIVE, F.lit(False))
    if source.born_in is None:
        archived = read_parquet_dataset(spark, source.archive_dir, MESSAGES)
    else:
        archived = read_archive_days(spark, source.archive_dir, MESSAGES, source.archive_days)
        archived = archived.where(_born_in(source.born_in))
    return _with_archive(live, transactional_archive(archived), source)


def _reduce_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    # A whole partition at once: one partial row per key and partition.
    received = list(batches)
    if received:
        yield from reduce_rows(pa.Table.from_batches(received)).to_batches()


def partials(rows: DataFrame) -> DataFrame:
    """Each partition's partial figures (reduce_rows, in its Python worker)."""
    narrow = rows.select(*INPUT_COLUMNS, FROM_ARCHIVE)
    return narrow.mapInArrow(_reduce_partition, from_arrow_schema(PARTIALS_SCHEMA))


def read_partials(spark: SparkSession, source: ReportInput, partitions: int) -> pa.Table:
    """Run the job and bring its rows to the driver, one per key (figures.compact)."""
    return compact(partials(messages(spark, source, partitions)).toArrow().cast(PARTIALS_SCHEMA))
