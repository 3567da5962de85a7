"""The coordinator_postgres data source: every row once, in any split, with faithful values."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg.types.string import TextLoader
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.pipeline.source import FORMAT
from coordinator.pipeline.tables import read_postgres, utc_wall_clock

AT = datetime(2026, 11, 20, 10, 30, 15, 123456, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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


# One column per type the pipeline reads, or might: awkward values, NULLs, empties.
EVERY_TYPE = """
CREATE TYPE mood AS ENUM ('calm', 'tense');
CREATE TABLE every_type (
    id int PRIMARY KEY, big bigint, small smallint, word text, short varchar(8), padded char(4),
    doc jsonb, raw_json json, words text[], numbers bigint[], flags boolean[], payload bytea,
    at timestamptz, wall timestamp, span interval, amount numeric, real4 real, real8 float8,
    day date, flag boolean, uid uuid, address inet, feeling mood
);
INSERT INTO every_type VALUES
 (1, 9223372036854775807, -32768, 'café ☕ "quoted"', 'short', 'ab', '{"b": [1, 2.50], "a": null}',
  '{"keep":  "spacing"}', ARRAY['p', 'q,r', NULL, ''], ARRAY[1, NULL, -3], ARRAY[true, NULL],
  '\\x00ff7f', '2026-11-20 10:30:15.123456+00', '2026-11-20 10:30:15.000001',
  '1 mon 2 days 03:04:05.5', 12.25, 1.5, 0.1, '2026-11-20', true,
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '10.0.0.1/8', 'calm'),
 (2, -9223372036854775808, 0, '', '', '', '[]', 'null', '{}', '{}', '{}', '\\x',
  '1969-07-20 20:17:40.000001+00', '1999-12-31 23:59:59.999999', '-00:00:00.000001',
  -0.000000000000000000001, -0.0, 1e308, '1900-02-28', false,
  '00000000-0000-0000-0000-000000000000', '::1', 'tense'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL);
"""


def _micros(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def _as_spark_gives(value: Any) -> Any:
    """What psycopg returns for a column, in the form the data source documents."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return _micros(value)  # compared with unix_micros: exact
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, date | datetime | bool | int | float | str | list | bytes | type(None)):
        return value
    return str(value)  # uuid, inet: their text


def _psycopg_rows(url: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(url) as conn:
        # json and jsonb as PostgreSQL prints them, not parsed
        conn.adapters.register_loader("json", TextLoader)
        conn.adapters.register_loader("jsonb", TextLoader)
        cursor = conn.execute("SELECT * FROM every_type")
        names = [column.name for column in cursor.description or []]
        return {
            row[0]: {name: _as_spark_gives(value) for name, value in zip(names, row, strict=True)}
            for row in cursor.fetchall()
        }


def _spark_rows(frame: DataFrame) -> dict[int, dict[str, Any]]:
    timestamps = [name for name, kind in frame.dtypes if kind == "timestamp"]
    frame = frame.select(
        *[
            F.unix_micros(name).alias(name) if name in timestamps else F.col(name)
            for name in frame.columns
        ]
    )
    rows = {}
    for row in frame.collect():
        values = row.asDict()
        values["payload"] = None if values["payload"] is None else bytes(values["payload"])
        rows[values["id"]] = values
    return rows


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, float) and isinstance(right, float):
        return (math.isnan(left) and math.isnan(right)) or (
            left == right and math.copysign(1, left) == math.copysign(1, right)
        )
    return type(left) is type(right) and left == right


def test_every_type_reads_exactly_what_psycopg_reads(
    spark: SparkSession, database_url: str, db: psycopg.Connection
) -> None:
    db.execute(EVERY_TYPE)
    frame = read_postgres(
        spark, database_url, "SELECT * FROM every_type", partition_column="id", partitions=3
    )
    assert dict(frame.dtypes) == {
        "id": "int",
        "big": "bigint",
        "small": "smallint",
        "word": "string",
        "short": "string",
        "padded": "string",
        "doc": "string",
        "raw_json": "string",
        "words": "array<string>",
        "numbers": "array<bigint>",
        "flags": "array<boolean>",
        "payload": "binary",
        "at": "timestamp",
        "wall": "timestamp_ntz",
        "span": "double",
        "amount": "double",
        "real4": "float",
        "real8": "double",
        "day": "date",
        "flag": "boolean",
        "uid": "string",
        "address": "string",
        "feeling": "string",
    }
    expected, got = _psycopg_rows(database_url), _spark_rows(frame)
    assert got.keys() == expected.keys() == {1, 2, 3}
    differences = [
        (key, name, got[key][name], value)
        for key, row in expected.items()
        for name, value in row.items()
        if not _same(got[key][name], value)
    ]
    assert differences == []
    assert got[1]["doc"] == '{"a": null, "b": [1, 2.50]}'  # jsonb's own text
    assert got[1]["span"] == 30 * 86400 + 2 * 86400 + 3 * 3600 + 4 * 60 + 5.5


def test_the_row_reader_gives_the_same_frame(
    spark: SparkSession, database_url: str, db: psycopg.Connection
) -> None:
    db.execute(EVERY_TYPE)

    def read(reader: str) -> DataFrame:
        return (
            spark.read.format(FORMAT)
            .option("url", database_url)
            .option("query", "SELECT * FROM every_type")
            .option("reader", reader)
            .load()
        )

    arrow, rows = read("arrow"), read("rows")
    assert arrow.schema == rows.schema
    assert utc_wall_clock(arrow).orderBy("id").collect() == (
        utc_wall_clock(rows).orderBy("id").collect()
    )


def _ids(frame: DataFrame) -> list[int | None]:
    """Every n read, as often as it was read."""
    return [row["n"] for row in frame.select("n").collect()]


@pytest.mark.parametrize(
    ("lower", "upper", "partitions"),
    [(10, 50, 4), (-1000, 1000, 8), (90, 200, 3), (0, 0, 2)],
    ids=["inside", "wider-than-the-data", "mostly-above", "one-value"],
)
def test_range_partitions_read_every_row_once_even_outside_the_bounds(
    spark: SparkSession, database_url: str, samples: int, lower: int, upper: int, partitions: int
) -> None:
    frame = (
        spark.read.format(FORMAT)
        .option("url", database_url)
        .option("table", "samples")
        .option("partition_column", "n")
        .option("num_partitions", partitions)
        .option("lower_bound", lower)  # rows below, above and NULL still belong to a range
        .option("upper_bound", upper)
        .load()
    )
    assert frame.rdd.getNumPartitions() == min(partitions, upper - lower + 1)
    ids = _ids(frame)
    assert sorted(ids, key=lambda n: (n is None, n)) == [*range(-5, 95), None]


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
        ids = _ids(frame)
        assert sorted(ids, key=lambda n: (n is None, n)) == [*range(-5, 95), None]
    sizes = by_range.rdd.glom().map(len).collect()
    assert sum(sizes) == samples and all(size > 0 for size in sizes)


def test_values_keep_their_meaning(spark: SparkSession, database_url: str, samples: int) -> None:
    frame = read_postgres(
        spark,
        database_url,
        "SELECT * FROM samples WHERE n = %(n)s AND label LIKE 'row %%'",
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
    assert row["at_us"] == _micros(AT + timedelta(seconds=7))
    assert row["span"] == 90.5 and row["amount"] == 12.25
    assert row["day"] == AT.date() and row["flag"] is False


def test_a_schema_given_to_the_reader_is_what_spark_gets(
    spark: SparkSession, database_url: str, samples: int
) -> None:
    frame = (
        spark.read.format(FORMAT)
        .schema("number int, name string")
        .option("url", database_url)
        .option("query", "SELECT n, label FROM samples WHERE n BETWEEN 1 AND 3")
        .load()
    )
    assert frame.dtypes == [("number", "int"), ("name", "string")]
    assert sorted(tuple(row) for row in frame.collect()) == [
        (1, "row 1"),
        (2, "row 2"),
        (3, "row 3"),
    ]


def test_types_created_after_a_first_read_are_read_as_text(
    spark: SparkSession, database_url: str, db: psycopg.Connection, samples: int
) -> None:
    # The Spark workers keep what they learnt of the database's types between reads.
    assert read_postgres(spark, database_url, "SELECT * FROM samples").count() == samples
    db.execute("CREATE TYPE size AS ENUM ('small', 'large')")
    db.execute("CREATE TABLE boxes (id int, size size, sizes size[])")
    db.execute("INSERT INTO boxes VALUES (1, 'large', ARRAY['small', 'large']::size[])")
    row = read_postgres(spark, database_url, "SELECT * FROM boxes").collect()[0]
    assert (row["size"], row["sizes"]) == ("large", "{small,large}")


def test_the_source_only_reads(
    spark: SparkSession, database_url: str, db: psycopg.Connection
) -> None:
    db.execute("CREATE SEQUENCE counter")
    frame = read_postgres(spark, database_url, "SELECT nextval('counter') AS value")
    with pytest.raises(Exception, match="read-only transaction"):
        frame.collect()
    assert db.execute("SELECT last_value, is_called FROM counter").fetchone() == (1, False)


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
