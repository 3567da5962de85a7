"""`coordinator pipeline audit`: the coordinator's outcomes against the producers' own records.

The producer side is a table in the producer's database (any server): by
default the SDK barrier helper's `coordinator_barrier(transaction_id,
outcome)`, where a row with outcome 'committed' is a committed local
transaction and 'rolled_back' the marker a check-back left for one that never
committed. Any other table works: name it, its key column, and the SQL
condition that means "committed" (without one, a row's existence does).

Each half message is matched to the producer rows whose key equals its
transaction id (or its message id, or one of its user properties), and three
kinds of inconsistency are listed, each with its ids:

- delivered_without_local_commit: the message was committed (delivered to
  consumers) but no producer row says the local transaction committed;
- local_commit_without_delivery: the local transaction committed but the
  message was rolled back, discarded or expired;
- pending_too_long: the message is still prepared after the threshold.

Nothing else is flagged: a rolled back message without a committed row, a
committed one with one, a prepared one younger than the threshold.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.db.urls import redact
from coordinator.pipeline.barrier import (
    BARRIER_KEY,
    BARRIER_TABLE,
    committed_condition,
    parse_match_on,
)
from coordinator.pipeline.figures import epoch_micros
from coordinator.pipeline.progress import JobProgress, QuietProgress
from coordinator.pipeline.report import database_now
from coordinator.pipeline.tables import (
    MESSAGES,
    read_named,
    read_parquet_dataset,
    read_postgres,
    transactional_archive,
    utc_wall_clock,
    with_archived,
)

DELIVERED_WITHOUT_LOCAL_COMMIT = "delivered_without_local_commit"
LOCAL_COMMIT_WITHOUT_DELIVERY = "local_commit_without_delivery"
PENDING_TOO_LONG = "pending_too_long"
KINDS = (DELIVERED_WITHOUT_LOCAL_COMMIT, LOCAL_COMMIT_WITHOUT_DELIVERY, PENDING_TOO_LONG)
NOT_DELIVERED_STATES = ("rolled_back", "discarded", "expired")

OUTPUT_COLUMNS = (
    "kind",
    "message_offset",
    "transaction_id",
    "message_id",
    "producer_group",
    "topic",
    "state",
    "local_outcome",
    "born_at",
    "resolved_at",
)


@dataclass(frozen=True)
class ProducerTable:
    """Where the producer records its local transactions."""

    url: str
    table: str = BARRIER_TABLE
    key: str = BARRIER_KEY
    committed_when: str | None = None  # SQL over the table's columns

    def condition(self) -> str:
        return committed_condition(self.table, self.committed_when)

    def query(self) -> str:
        return (
            sql.SQL(
                "SELECT {key}::text AS local_key, coalesce(({cond}), false) AS local_committed "
                "FROM {table}"
            )
            .format(
                key=sql.Identifier(self.key),
                cond=sql.SQL(self.condition()),
                table=sql.Identifier(*self.table.split(".")),
            )
            .as_string()
        )


@dataclass(frozen=True)
class AuditOptions:
    producer: ProducerTable
    match_on: str = "transaction_id"  # or message_id, or property:NAME
    producer_groups: tuple[str, ...] = ()
    pending_longer_than: timedelta = timedelta(hours=1)
    archive_dir: Path | None = None
    output_dir: Path | None = None
    as_of: datetime | None = None
    partitions: int = 4
    keep_rows: int = 10_000  # inconsistencies returned to the caller (all go to Parquet)


@dataclass
class AuditResult:
    as_of: datetime
    messages: int
    producer_rows: int
    counts: dict[str, int]
    rows: list[dict[str, Any]] = field(default_factory=list)
    output: Path | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def match_column(match_on: str) -> Column:
    """The message-side value compared with the producer table's key."""
    column, property_name = parse_match_on(match_on)
    if property_name is None:
        return F.col(column)
    return F.from_json(F.col(column), "map<string,string>").getItem(property_name)


def _messages(spark: SparkSession, url: str, options: AuditOptions) -> DataFrame:
    live = read_named(
        spark, url, "pipeline_audit_messages", partition_column="id", partitions=options.partitions
    )
    messages = live
    if options.archive_dir is not None:
        archived = transactional_archive(read_parquet_dataset(spark, options.archive_dir, MESSAGES))
        messages = with_archived(live, archived)
    if options.producer_groups:
        messages = messages.where(F.col("producer_group").isin(*options.producer_groups))
    return messages


class ProducerTableError(ValueError):
    """The producer database URL, table, key or condition is not valid."""


def check_producer_table(producer: ProducerTable) -> None:
    """Fail early and clearly: unreachable database, unknown table, bad condition.

    psycopg.OperationalError (cannot connect) passes through as it is.
    """
    try:
        conn = psycopg.connect(producer.url)
    except psycopg.ProgrammingError as error:  # a URL libpq refuses (connect_timeout=soon)
        reason = redact(str(error).strip())
        raise ProducerTableError(f"the producer database URL is not valid: {reason}") from None
    with conn:
        try:
            conn.execute(f"SELECT * FROM ({producer.query()}) AS q LIMIT 0")
        except psycopg.ProgrammingError as error:
            # The primary message only: the rest is a multi-line pointer into
            # SQL the user did not write.
            reason = error.diag.message_primary or str(error).strip()
            raise ProducerTableError(
                f"cannot read {producer.table}.{producer.key} where "
                f"{producer.condition()!r}: {reason}"
            ) from None


def _producer_outcomes(spark: SparkSession, options: AuditOptions) -> DataFrame:
    rows = read_postgres(
        spark,
        options.producer.url,
        options.producer.query(),
        hash_partition_column="local_key",
        partitions=options.partitions,
    )
    # Several rows per key (a business table): committed if any row says so.
    return (
        rows.where(F.col("local_key").isNotNull())
        .groupBy("local_key")
        .agg(F.max("local_committed").alias("local_committed"))
    )


def inconsistencies(
    messages: DataFrame, outcomes: DataFrame, match_on: str, as_of: datetime, pending: timedelta
) -> DataFrame:
    keyed = messages.withColumn("match_key", match_column(match_on))
    joined = keyed.join(outcomes, keyed["match_key"] == outcomes["local_key"], "left")
    committed_locally = F.coalesce(F.col("local_committed"), F.lit(False))
    state = F.col("state")
    pending_since = F.timestamp_micros(F.lit(epoch_micros(as_of - pending)))
    kind = (
        F.when((state == "committed") & ~committed_locally, F.lit(DELIVERED_WITHOUT_LOCAL_COMMIT))
        .when(
            state.isin(*NOT_DELIVERED_STATES) & committed_locally,
            F.lit(LOCAL_COMMIT_WITHOUT_DELIVERY),
        )
        .when((state == "prepared") & (F.col("born_at") < pending_since), F.lit(PENDING_TOO_LONG))
    )
    local_outcome = (
        F.when(F.col("local_key").isNull(), F.lit("no row"))
        .when(committed_locally, F.lit("committed"))
        .otherwise(F.lit("not committed"))
    )
    return (
        joined.withColumn("kind", kind)
        .where(F.col("kind").isNotNull())
        .withColumn("local_outcome", local_outcome)
        .withColumnRenamed("id", "message_offset")
        .select(*OUTPUT_COLUMNS)
    )


def run_audit(
    spark: SparkSession, url: str, options: AuditOptions, *, progress: JobProgress | None = None
) -> AuditResult:
    progress = progress or QuietProgress()
    parse_match_on(options.match_on)  # a bad --match-on fails before any Spark work
    check_producer_table(options.producer)
    as_of = options.as_of or database_now(url)
    with progress.step("reading half messages and the producer's table"):
        messages = _messages(spark, url, options).persist()
        outcomes = _producer_outcomes(spark, options).persist()
        message_count, producer_rows = messages.count(), outcomes.count()
    try:
        with progress.step("matching outcomes"):
            found = inconsistencies(
                messages, outcomes, options.match_on, as_of, options.pending_longer_than
            ).persist()
            counts = Counter({kind: 0 for kind in KINDS})
            counts.update(
                {
                    r["kind"]: r["n"]
                    for r in found.groupBy("kind").agg(F.count(F.lit(1)).alias("n")).collect()
                }
            )
            rows = [
                r.asDict()
                for r in utc_wall_clock(found)
                .orderBy("kind", "message_offset")
                .limit(options.keep_rows)
                .collect()
            ]
            output = None
            if options.output_dir is not None:
                output = options.output_dir / "inconsistencies"
                found.orderBy("kind", "message_offset").coalesce(1).write.mode("overwrite").parquet(
                    str(output)
                )
            found.unpersist()
    finally:
        messages.unpersist()
        outcomes.unpersist()
    return AuditResult(
        as_of=as_of,
        messages=message_count,
        producer_rows=producer_rows,
        counts=dict(counts),
        rows=rows,
        output=output,
    )
