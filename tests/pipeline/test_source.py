"""The coordinator_postgres data source: every row once, in any split, with faithful values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from coordinator.pipeline.source import FORMAT
from coordinator.pipeline.tables import read_postgres

AT = datetime(2026, 11, 20, 10, 30, 15, 123456, tzinfo=UTC)


@pytest.fixture
def samples(db: psycopg.Connection) -> int:
    db.execute(
        """
        CREATE TABLE samples (
            n bigint, label text, doc jsonb, words text[], payload bytea,
            at timestamptz, span interval, amount numeric, day date, flag boolean
        )
        """
    )
    with db.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO samples VALUES (%s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    n,
                    f"row {n}",
                    '{"b": [1, 2], "a": "x"}',
                    ["p", "q,r"],
                    bytes([0, 255, n % 256]),
                    AT + timedelta(seconds=n),
                    timedelta(seconds=90.5),
                    "12.25",
                    AT.date(),
                    n % 2 == 0,
                )
                for n in range(-5, 95)
            ]
            + [(None, "no number", None, None, None, None, None, None, None, None)],
        )
    return 101


def _collect_labels(frame) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(r["label"] for r in frame.select("label").collect())


def test_range_partitions_read_every_row_once_even_outside_the_bounds(
    spark: SparkSession, database_url: str, samples: int
) -> None:
    frame = (
        spark.read.format(FORMAT)
        .option("url", database_url)
        .option("table", "samples")
        .option("partition_column", "n")
        .option("num_partitions", 4)
        .option("lower_bound", 10)  # rows below, above and NULL still belong to a range
        .option("upper_bound", 50)
        .load()
    )
    assert frame.rdd.getNumPartitions() == 4
    labels = _collect_labels(frame)
    assert len(labels) == samples and len(set(labels)) == samples


def test_bounds_default_to_the_columns_range_and_hash_splits_work_too(
    spark: SparkSession, database_url: str, samples: int
) -> None:
    by_range = read_postgres(
        spark, database_url, "SELECT * FROM samples", partition_column="n", partitions=3
    )
    by_hash = read_postgres(
        spark, database_url, "SELECT * FROM samples", hash_partition_column="label", partitions=3
    )
    for frame in (by_range, by_hash):
        assert frame.rdd.getNumPartitions() == 3
        labels = _collect_labels(frame)
        assert len(labels) == samples and len(set(labels)) == samples


def test_values_keep_their_meaning(spark: SparkSession, database_url: str, samples: int) -> None:
    frame = read_postgres(
        spark,
        database_url,
        "SELECT * FROM samples WHERE n = %(n)s",
        params={"n": 7},
    )
    types = dict(frame.dtypes)
    assert types == {
        "n": "bigint",
        "label": "string",
        "doc": "string",
        "words": "array<string>",
        "payload": "binary",
        "at": "timestamp",
        "span": "double",
        "amount": "double",
        "day": "date",
        "flag": "boolean",
    }
    row = frame.withColumn("at_us", F.unix_micros("at")).collect()[0]
    assert row["doc"] == '{"a": "x", "b": [1, 2]}'  # PostgreSQL's own jsonb text
    assert row["words"] == ["p", "q,r"]
    assert bytes(row["payload"]) == bytes([0, 255, 7])
    expected = AT + timedelta(seconds=7)
    assert row["at_us"] == (expected - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
        microseconds=1
    )
    assert row["span"] == 90.5 and row["amount"] == 12.25
    assert row["day"] == AT.date() and row["flag"] is False


def test_an_empty_result_has_its_schema_and_no_rows(
    spark: SparkSession, database_url: str, samples: int
) -> None:
    frame = read_postgres(
        spark,
        database_url,
        "SELECT n, label FROM samples WHERE false",
        partition_column="n",
        partitions=4,
    )
    assert frame.columns == ["n", "label"]
    assert frame.count() == 0


def test_a_missing_url_is_a_clear_error(spark: SparkSession) -> None:
    with pytest.raises(Exception, match="needs the option 'url'"):
        spark.read.format(FORMAT).option("query", "SELECT 1").load().collect()
