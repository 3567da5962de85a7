"""A PySpark Python Data Source that reads a PostgreSQL query in parallel partitions.

Each Spark task reads one partition of the query with adbc-driver-postgresql
(coordinator/pipeline/columnar.py): PostgreSQL's binary COPY, decoded into
Arrow record batches in C++, handed to Spark as they are. It reaches any
server libpq reaches, the embedded one's UNIX socket included, and needs no
jar (on TCP, Spark's JDBC source reads no faster: docs/pipeline.md).

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
`fetch_size` (at most this many rows per Arrow batch, default 20000);
`reader` (`arrow`, the default, or `rows`: psycopg's server-side cursor and
a Python object per value, kept as the benchmark's baseline). Without a
partition column the query is read by one task. The schema comes from the
query's result columns (json and jsonb as their text, intervals as seconds,
numeric as double) unless the reader is given one.
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

from coordinator.pipeline import columnar
from coordinator.pipeline.pgtypes import (
    arrow_schema,
    register_loaders,
    spark_schema,
    to_record_batch,
)

FORMAT = "coordinator_postgres"
DEFAULT_FETCH_SIZE = 20_000
ARROW, ROWS = "arrow", "rows"


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
    reader: str

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
        reader = (get("reader") or ARROW).lower()
        if reader not in (ARROW, ROWS):
            raise ValueError(f"the coordinator_postgres reader is arrow or rows, not {reader!r}")
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
            reader=reader,
        )

    def subquery(self) -> sql.Composable:
        return sql.SQL("({}) AS q").format(sql.SQL(self.query))


def _identifier(dotted: str) -> sql.Identifier:
    """`schema.table` or `table` as a quoted identifier."""
    return sql.Identifier(*dotted.split("."))


def connect(url: str) -> psycopg.Connection[Any]:
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


def plan_slices(spec: ReadSpec) -> list[QuerySlice]:
    """The partitions of a read: each row of the query in exactly one of them."""
    if spec.num_partitions == 1:
        return [QuerySlice(None)]
    if spec.hash_partition_column:
        return _hash_slices(spec.hash_partition_column, spec.num_partitions)
    if not spec.partition_column:
        return [QuerySlice(None)]
    lower, upper = spec.lower_bound, spec.upper_bound
    if lower is None or upper is None:
        column = sql.Identifier(spec.partition_column)
        with connect(spec.url) as conn:
            bounds = conn.execute(
                sql.SQL("SELECT min(q.{c})::bigint, max(q.{c})::bigint FROM {s}").format(
                    c=column, s=spec.subquery()
                ),
                spec.params,
            ).fetchone()
        assert bounds is not None  # an aggregate's one row
        found_lower, found_upper = bounds
        lower = found_lower if lower is None else lower
        upper = found_upper if upper is None else upper
    if lower is None or upper is None or upper < lower:
        return [QuerySlice(None)]  # nothing to split: one (possibly empty) task
    return _range_slices(spec.partition_column, lower, upper, spec.num_partitions)


@dataclass(frozen=True)
class ColumnarPlan:
    """What every task of the Arrow reader runs: the query, parameters written in,
    and its result columns (name, type OID), found once when the read is planned."""

    query: str
    columns: list[tuple[str, int]]

    @classmethod
    def of(cls, spec: ReadSpec) -> ColumnarPlan:
        with connect(spec.url) as conn:
            query = columnar.render_query(conn, spec.query, spec.params)
            return cls(query, columnar.describe(conn, query))


class PostgresReader(DataSourceReader):
    def __init__(self, spec: ReadSpec, schema: StructType) -> None:
        self.spec = spec
        self.schema = schema
        # Planned here, not in partitions(): Spark pickles the reader for
        # its tasks before it asks for the partitions.
        self.plan = ColumnarPlan.of(spec) if spec.reader == ARROW else None
        if self.plan is not None and len(self.plan.columns) != len(schema.fields):
            raise ValueError(
                f"the schema given has {len(schema.fields)} columns, "
                f"the query returns {len(self.plan.columns)}"
            )

    def partitions(self) -> list[QuerySlice]:
        return plan_slices(self.spec)

    def read(self, partition: QuerySlice) -> Iterator[Any]:  # type: ignore[override]  # Spark passes back what partitions() gave
        target = arrow_schema(self.schema)
        if self.plan is None:
            yield from self._read_rows(partition, target)
            return
        statement = columnar.select_statement(
            self.plan.query, self.plan.columns, partition.condition
        )
        yield from columnar.read_batches(self.spec.url, statement, target, self.spec.fetch_size)

    def _read_rows(self, partition: QuerySlice, target: Any) -> Iterator[Any]:
        """The baseline: a server-side cursor, each value a Python object first."""
        spec = self.spec
        statement = sql.SQL("SELECT * FROM {}").format(spec.subquery())
        if partition.condition:
            statement = sql.SQL("{} WHERE {}").format(statement, sql.SQL(partition.condition))
        with (
            connect(spec.url) as conn,
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
        with connect(spec.url) as conn:
            query = columnar.render_query(conn, spec.query, spec.params)
            return spark_schema(columnar.describe(conn, query))

    def reader(self, schema: StructType) -> PostgresReader:
        return PostgresReader(ReadSpec.from_options(self.options), schema)


def register(spark: SparkSession) -> None:
    spark.dataSource.register(PostgresDataSource)
