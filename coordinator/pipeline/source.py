"""A PySpark Python Data Source that reads a PostgreSQL query in parallel partitions.

Spark's JDBC reader cannot reach the embedded server (it listens on a UNIX
socket only) and needs a driver jar; this source reads with psycopg instead,
in the Python workers, and hands Spark Arrow record batches.

    spark.read.format("coordinator_postgres")
        .option("url", "postgresql://...")
        .option("query", "SELECT id, topic FROM messages")   # or .option("table", ...)
        .option("partition_column", "id")                   # split by ranges of this column
        .option("num_partitions", 8)
        .load()

Options: `url` (libpq URL, required); `query` or `table`; `params` (a JSON
object bound to `%(name)s` placeholders of the query; with params, a literal
`%` in the query is written `%%`); `partition_column` (an integer column: the
query is split into `num_partitions` ranges between `lower_bound` and
`upper_bound`, by default the column's minimum and maximum; rows outside the
bounds and NULLs go to the first or last range, so no row is ever missed);
`hash_partition_column` (any column: split by a hash of its text instead);
`fetch_size` (rows per Arrow batch, default 20000). Without a partition
column the query is read by one task. The schema comes from the query's
result columns (json and jsonb as their text, intervals as seconds) unless
the reader is given one.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import set_json_loads
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from coordinator.pipeline.pgtypes import (
    arrow_schema,
    register_loaders,
    spark_schema,
    to_record_batch,
)

FORMAT = "coordinator_postgres"
DEFAULT_FETCH_SIZE = 20_000


@dataclass(frozen=True)
class ReadSpec:
    url: str
    query: str
    params: dict[str, Any] | None
    partition_column: str | None
    hash_partition_column: str | None
    num_partitions: int
    lower_bound: int | None
    upper_bound: int | None
    fetch_size: int

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadSpec:
        def get(name: str) -> str | None:
            value = options.get(name)
            return None if value in (None, "") else str(value)

        url = get("url")
        if url is None:
            raise ValueError("the coordinator_postgres source needs the option 'url'")
        query, table = get("query"), get("table")
        if (query is None) == (table is None):
            raise ValueError("give the coordinator_postgres source exactly one of query, table")
        if table is not None:
            query = sql.SQL("SELECT * FROM {}").format(_identifier(table)).as_string()
        params = get("params")
        lower, upper = get("lower_bound"), get("upper_bound")
        return cls(
            url=url,
            query=str(query),
            params=json.loads(params) if params else None,
            partition_column=get("partition_column"),
            hash_partition_column=get("hash_partition_column"),
            num_partitions=max(1, int(get("num_partitions") or 1)),
            lower_bound=int(lower) if lower is not None else None,
            upper_bound=int(upper) if upper is not None else None,
            fetch_size=max(1, int(get("fetch_size") or DEFAULT_FETCH_SIZE)),
        )

    def subquery(self) -> sql.Composable:
        return sql.SQL("({}) AS q").format(sql.SQL(self.query))  # type: ignore[arg-type]


def _identifier(dotted: str) -> sql.Identifier:
    """`schema.table` or `table` as a quoted identifier."""
    return sql.Identifier(*dotted.split("."))


def _connect(url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url)
    conn.read_only = True
    # json and jsonb arrive as PostgreSQL's own text, not parsed into dicts.
    set_json_loads(lambda data: data if isinstance(data, str) else bytes(data).decode(), conn)
    register_loaders(conn)
    return conn


@dataclass(frozen=True)
class QuerySlice(InputPartition):
    """One task's share of the query: a WHERE condition on the partition column."""

    condition: str | None


def _range_slices(column: str, lower: int, upper: int, count: int) -> list[QuerySlice]:
    ident = sql.Identifier(column).as_string()
    count = max(1, min(count, upper - lower + 1))
    step = -(-(upper - lower + 1) // count)  # ceiling division
    cuts = [lower + step * k for k in range(1, count)]
    if not cuts:
        return [QuerySlice(None)]
    slices = [QuerySlice(f"q.{ident} < {cuts[0]} OR q.{ident} IS NULL")]
    slices += [
        QuerySlice(f"q.{ident} >= {low} AND q.{ident} < {high}")
        for low, high in itertools.pairwise(cuts)
    ]
    slices.append(QuerySlice(f"q.{ident} >= {cuts[-1]}"))
    return slices


def _hash_slices(column: str, count: int) -> list[QuerySlice]:
    ident = sql.Identifier(column).as_string()
    bucket = f"((hashtext(q.{ident}::text) & 2147483647) % {count})"
    return [
        QuerySlice(f"{bucket} = {k}" + (f" OR q.{ident} IS NULL" if k == 0 else ""))
        for k in range(count)
    ]


class PostgresReader(DataSourceReader):
    def __init__(self, spec: ReadSpec, schema: StructType) -> None:
        self.spec = spec
        self.schema = schema

    def partitions(self) -> list[QuerySlice]:
        spec = self.spec
        if spec.num_partitions == 1:
            return [QuerySlice(None)]
        if spec.hash_partition_column:
            return _hash_slices(spec.hash_partition_column, spec.num_partitions)
        if not spec.partition_column:
            return [QuerySlice(None)]
        lower, upper = spec.lower_bound, spec.upper_bound
        if lower is None or upper is None:
            column = sql.Identifier(spec.partition_column)
            with _connect(spec.url) as conn:
                found_lower, found_upper = conn.execute(
                    sql.SQL("SELECT min(q.{c})::bigint, max(q.{c})::bigint FROM {s}").format(
                        c=column, s=spec.subquery()
                    ),
                    spec.params,
                ).fetchone()  # type: ignore[misc]
            lower = found_lower if lower is None else lower
            upper = found_upper if upper is None else upper
        if lower is None or upper is None or upper < lower:
            return [QuerySlice(None)]  # nothing to split: one (possibly empty) task
        return _range_slices(spec.partition_column, lower, upper, spec.num_partitions)

    def read(self, partition: QuerySlice) -> Iterator[Any]:
        import pyarrow as pa  # noqa: F401  (imported in the worker before batches are built)

        spec = self.spec
        statement = sql.SQL("SELECT * FROM {}").format(spec.subquery())
        if partition.condition:
            statement = sql.SQL("{} WHERE {}").format(statement, sql.SQL(partition.condition))
        target = arrow_schema(self.schema)
        with (
            _connect(spec.url) as conn,
            conn.cursor(name="coordinator_pipeline_read", binary=True) as cursor,
        ):
            cursor.itersize = spec.fetch_size
            cursor.execute(statement, spec.params)
            while rows := cursor.fetchmany(spec.fetch_size):
                yield to_record_batch(rows, target, self.schema)


class PostgresDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        spec = ReadSpec.from_options(self.options)
        with _connect(spec.url) as conn:
            cursor = conn.execute(
                sql.SQL("SELECT * FROM {} LIMIT 0").format(spec.subquery()), spec.params
            )
            return spark_schema([(c.name, c.type_code) for c in cursor.description or []])

    def reader(self, schema: StructType) -> PostgresReader:
        return PostgresReader(ReadSpec.from_options(self.options), schema)


def register(spark: SparkSession) -> None:
    spark.dataSource.register(PostgresDataSource)
