"""PostgreSQL result columns as Spark and Arrow types, and values as Arrow arrays.

The data source hands Spark Arrow record batches; this module decides each
column's Spark and Arrow type from its PostgreSQL type OID. For the `rows`
reader (the benchmark's baseline) it also turns the values psycopg returns
into Arrow arrays; the columnar reader (columnar.py) has ADBC decode them.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg.adapt import Loader
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

# PostgreSQL built-in type OIDs (pg_type.dat); anything else is read as text.
_SPARK_TYPE_BY_OID: dict[int, DataType] = {
    16: BooleanType(),
    17: BinaryType(),
    20: LongType(),
    21: ShortType(),
    23: IntegerType(),
    25: StringType(),
    114: StringType(),  # json: its text
    700: FloatType(),
    701: DoubleType(),
    1042: StringType(),
    1043: StringType(),
    1082: DateType(),
    1114: TimestampNTZType(),
    1184: TimestampType(),
    1186: DoubleType(),  # interval: seconds
    1700: DoubleType(),  # numeric
    2950: StringType(),  # uuid
    3802: StringType(),  # jsonb: its text
    1000: ArrayType(BooleanType()),
    1005: ArrayType(ShortType()),
    1007: ArrayType(IntegerType()),
    1009: ArrayType(StringType()),
    1015: ArrayType(StringType()),
    1016: ArrayType(LongType()),
    1022: ArrayType(DoubleType()),
}


# PostgreSQL's binary timestamps count microseconds from 2000-01-01.
_POSTGRES_EPOCH_US = 946_684_800_000_000


class _MicrosecondsLoader(Loader):
    """timestamp[tz] as PostgreSQL's integer, not a datetime: Arrow converts in bulk."""

    format = psycopg.pq.Format.BINARY

    def load(
        self, data: Any, _unpack: Callable[[Any], tuple[int]] = struct.Struct(">q").unpack
    ) -> int:
        return _unpack(data)[0]


def register_loaders(conn: psycopg.Connection[Any]) -> None:
    """What a binary cursor on conn needs for to_record_batch."""
    conn.adapters.register_loader("timestamptz", _MicrosecondsLoader)
    conn.adapters.register_loader("timestamp", _MicrosecondsLoader)


def spark_type_for_oid(oid: int) -> DataType:
    return _SPARK_TYPE_BY_OID.get(oid, StringType())


def spark_schema(columns: Sequence[tuple[str, int]]) -> StructType:
    """The Spark schema of a result with these (name, type OID) columns."""
    return StructType([StructField(name, spark_type_for_oid(oid), True) for name, oid in columns])


def arrow_type(spark_type: DataType) -> pa.DataType:
    if isinstance(spark_type, ArrayType):
        return pa.list_(arrow_type(spark_type.elementType))
    simple: dict[type[DataType], pa.DataType] = {
        BooleanType: pa.bool_(),
        BinaryType: pa.binary(),
        LongType: pa.int64(),
        IntegerType: pa.int32(),
        ShortType: pa.int16(),
        StringType: pa.string(),
        FloatType: pa.float32(),
        DoubleType: pa.float64(),
        DateType: pa.date32(),
        TimestampType: pa.timestamp("us", tz="UTC"),
        TimestampNTZType: pa.timestamp("us"),
    }
    try:
        return simple[type(spark_type)]
    except KeyError:
        raise ValueError(f"the PostgreSQL data source cannot produce {spark_type}") from None


def arrow_schema(schema: StructType) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.dataType), nullable=True) for f in schema])


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode()
    return str(value)


def _as_float(value: Any) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def _converter(spark_type: DataType, sample: Any) -> Callable[[Any], Any] | None:
    """A per-value conversion when psycopg's Python type is not what Arrow takes."""
    if isinstance(spark_type, StringType) and not isinstance(sample, str):
        return _as_text
    if isinstance(spark_type, DoubleType | FloatType) and not isinstance(sample, float):
        return _as_float
    return None


def _timestamps(values: list[Any], target: pa.DataType) -> pa.Array:
    micros = pc.add(pa.array(values, type=pa.int64()), _POSTGRES_EPOCH_US)
    return micros.cast(target)


def to_record_batch(
    rows: Sequence[Sequence[Any]], schema: pa.Schema, spark: StructType
) -> pa.RecordBatch:
    """Rows from a binary cursor with register_loaders as one Arrow record batch."""
    arrays = []
    for index, (field, spark_field) in enumerate(zip(schema, spark.fields, strict=True)):
        values = [row[index] for row in rows]
        if isinstance(spark_field.dataType, TimestampType | TimestampNTZType):
            arrays.append(_timestamps(values, field.type))
            continue
        sample = next((v for v in values if v is not None), None)
        convert = _converter(spark_field.dataType, sample) if sample is not None else None
        if convert is not None:
            values = [None if v is None else convert(v) for v in values]
        arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
