"""A query's rows as Arrow record batches, decoded from PostgreSQL's binary COPY in C++.

adbc-driver-postgresql runs a query as `COPY (query) TO STDOUT (FORMAT
binary)` and decodes the stream straight into Arrow columns: no Python
object per row or per value, which is what made reading through psycopg
slow (each value a Python object, then gathered into Arrow).

What Arrow has no exact type for is converted by PostgreSQL itself, in the
statement: intervals become seconds (`extract(epoch ...)`, as the
pipeline's SQL computes them), numeric a float8 (PostgreSQL rounds it as
Python's float() would), and every other type its text as PostgreSQL
prints it (json and jsonb, uuid, enums, inet, arrays of them, ...). The
batches are then cast to the Arrow schema of the Spark schema asked for.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import adbc_driver_manager
import adbc_driver_postgresql
import psycopg
import pyarrow as pa
from psycopg import sql

# Types whose binary form ADBC decodes to the Arrow type pgtypes maps them to:
# bool, bytea, int8, int2, int4, text, float4, float8, bpchar, varchar, date,
# timestamp, timestamptz, and the arrays bool[], int2[], int4[], text[],
# varchar[], int8[], float8[].
_DECODED_AS_IS = frozenset(
    {16, 17, 20, 21, 23, 25, 700, 701, 1042, 1043, 1082, 1114, 1184}
    | {1000, 1005, 1007, 1009, 1015, 1016, 1022}
)
_INTERVAL = 1186
_NUMERIC = 1700


def column_expression(name: str, oid: int) -> sql.Composable:
    """The select-list entry that reads column `name` of subquery q as Arrow can hold it."""
    column = sql.SQL("q.{}").format(sql.Identifier(name))
    if oid in _DECODED_AS_IS:
        value: sql.Composable = column
    elif oid == _INTERVAL:
        value = sql.SQL("extract(epoch FROM {})::float8").format(column)
    elif oid == _NUMERIC:
        value = sql.SQL("{}::float8").format(column)
    else:
        # The type's output function, as psql shows it: format's %s calls it,
        # where a cast to text may not (inet::text adds the netmask).
        value = sql.SQL("CASE WHEN {c} IS NOT NULL THEN format('%s', {c}) END").format(c=column)
    return sql.SQL("{} AS {}").format(value, sql.Identifier(name))


def select_statement(
    query: str, columns: Sequence[tuple[str, int]], condition: str | None = None
) -> str:
    """`SELECT <columns, converted> FROM (query) AS q [WHERE condition]`, as text.

    query is complete SQL (parameters already inlined, see render_query);
    condition is a partition's WHERE clause over q.
    """
    statement = sql.SQL("SELECT {} FROM ({}) AS q").format(
        sql.SQL(", ").join(column_expression(name, oid) for name, oid in columns),
        sql.SQL(query),
    )
    if condition:
        statement = sql.SQL("{} WHERE {}").format(statement, sql.SQL(condition))
    return statement.as_string()


def render_query(conn: psycopg.Connection[Any], query: str, params: dict[str, Any] | None) -> str:
    """The query with its `%(name)s` parameters written in as SQL literals.

    COPY takes no parameters; psycopg quotes each value as it would send it.
    """
    if not params:
        return query
    return psycopg.ClientCursor(conn).mogrify(query, params)


def describe(conn: psycopg.Connection[Any], query: str) -> list[tuple[str, int]]:
    """The (name, type OID) of each result column of a complete query."""
    cursor = conn.execute(sql.SQL("SELECT * FROM ({}) AS q LIMIT 0").format(sql.SQL(query)))
    return [(column.name, column.type_code) for column in cursor.description or []]


# ADBC objects allow serialized access from several threads, never concurrent
# access (adbc.h), and adbc-driver-postgresql's database shows why: it counts
# its open connections in a plain integer that opening and closing a
# connection change, with the GIL released (PostgresDatabase::Connect and
# Disconnect). Two threads opening or closing connections of one database at
# once lose an update, and a later close fails with "[libpq] Open connection
# count underflowed" (or the database cannot be released). So a database
# serves one connection at a time: a read takes an idle database of its URL,
# or makes one, and gives it back once its connection is closed. Threads
# reading at once (the report's in-process engine) each hold their own.
# Making a database loads PostgreSQL's type catalogue (queries on a connection
# of its own, ~0.1 s), so idle ones are kept for later reads (a Python worker
# runs many Spark tasks); they hold no connection. Only built-in types reach
# ADBC (see column_expression), so a catalogue loaded before a later CREATE
# TYPE is still right.
_IDLE_KEPT = 32
_idle: list[tuple[str, Any]] = []  # (url, database), the most recently used last
_idle_lock = threading.Lock()


def _take_database(url: str) -> Any:
    """An idle database of `url`, now this caller's alone, or a new one."""
    with _idle_lock:
        for index in range(len(_idle) - 1, -1, -1):
            if _idle[index][0] == url:
                return _idle.pop(index)[1]
    return adbc_driver_postgresql.connect(url)  # outside the lock: it connects


def _give_back(url: str, database: Any) -> None:
    """A database whose connection is closed, idle again; the oldest beyond the kept ones close."""
    with _idle_lock:
        _idle.append((url, database))
        surplus = [entry for _, entry in _idle[: max(0, len(_idle) - _IDLE_KEPT)]]
        del _idle[: len(surplus)]
    for database in surplus:
        _discard(database)


def _discard(database: Any) -> None:
    """A database after a failure: released if it can be, never used again."""
    with contextlib.suppress(Exception):
        database.close()


def close_idle_databases() -> None:
    """Release every idle database (the driver refuses one that still counts a connection)."""
    with _idle_lock:
        idle = [database for _, database in _idle]
        _idle.clear()
    for database in idle:
        database.close()


def _open(url: str) -> tuple[Any, Any]:
    """A database of this caller's own and a connection of it whose transactions are read-only."""
    database = None
    try:
        database = _take_database(url)
        conn = adbc_driver_manager.AdbcConnection(database)
    except adbc_driver_manager.Error:
        if database is not None:
            # Its server may be another one now (a failover): make a new one next time.
            _discard(database)
        _raise_if_unreachable(url)
        raise
    try:
        with adbc_driver_manager.AdbcStatement(conn) as statement:
            statement.set_sql_query("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            statement.execute_update()
    except BaseException:
        _close(url, database, conn)
        raise
    return database, conn


def _close(url: str, database: Any, conn: Any) -> None:
    """Close the connection, then give its database back (it is another's from then on)."""
    try:
        conn.close()
    except BaseException:
        _discard(database)
        raise
    _give_back(url, database)


def _raise_if_unreachable(url: str) -> None:
    """After a failed ADBC call: psycopg's OperationalError, with libpq's reason, if
    the server cannot be reached now (the pipeline's CLI says "cannot reach a
    database" and exits 5 on it); nothing if it can (the error was something else)."""
    psycopg.connect(url).close()


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """The batch with the target's names and types (a cast only where they differ)."""
    arrays = [
        column if column.type == field.type else column.cast(field.type)
        for column, field in zip(batch.columns, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def read_batches(
    url: str, statement: str, target: pa.Schema, max_rows: int
) -> Iterator[pa.RecordBatch]:
    """The statement's rows as batches of at most max_rows rows, in the target schema."""
    database, conn = _open(url)
    try:
        with adbc_driver_manager.AdbcStatement(conn) as query:
            query.set_sql_query(statement)
            stream, _ = query.execute_query()
            for batch in pa.RecordBatchReader.from_stream(stream):
                # Slices are views of the same buffers: no copy.
                for start in range(0, batch.num_rows, max_rows):
                    yield conform(batch.slice(start, max_rows), target)
    except (adbc_driver_manager.Error, OSError):
        # OSError: a failure after the first batch, reported by Arrow's stream reader.
        _raise_if_unreachable(url)
        raise
    finally:
        _close(url, database, conn)
