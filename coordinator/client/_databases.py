"""The database handles the SDK's PostgreSQL helpers take, and a statement run on any of them.

A helper (the inbox) is given a libpq URL, a psycopg_pool pool, or an
SQLAlchemy Engine or sessionmaker (their asyncio twins for the async
helpers), and hands its user's code whatever it opened: a psycopg
connection, an SQLAlchemy Connection or Session. Statements are written
with `:name` parameters, SQLAlchemy's style, and rewritten for psycopg.
psycopg and SQLAlchemy are imported only when used.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

# A table name the helpers splice into their statements: a plain identifier,
# optionally schema-qualified, nothing that needs quoting.
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")


def plain_table_name(table: str, what: str) -> str:
    """`table`, or ValueError with a sentence naming `what` (e.g. "inbox")."""
    if not _IDENTIFIER.match(table):
        raise ValueError(f"{what} table name {table!r} is not a plain SQL identifier")
    return table


@contextlib.contextmanager
def transaction(database: Any) -> Iterator[Any]:
    """A connection (or session) of `database` in a transaction: committed
    when the block ends, rolled back when it raises."""
    if isinstance(database, str):
        import psycopg

        with psycopg.connect(database) as conn:  # commits, or rolls back, then closes
            yield conn
    elif _is_pool(database):  # psycopg_pool.ConnectionPool: the same on leaving
        with database.connection() as conn:
            yield conn
    else:  # SQLAlchemy Engine (a Connection) or sessionmaker (a Session)
        with database.begin() as conn:
            yield conn


@contextlib.asynccontextmanager
async def async_transaction(database: Any) -> AsyncIterator[Any]:
    """The asyncio twin: a libpq URL, an AsyncConnectionPool, an SQLAlchemy
    AsyncEngine or async_sessionmaker."""
    if isinstance(database, str):
        import psycopg

        async with await psycopg.AsyncConnection.connect(database) as conn:
            yield conn
    elif _is_pool(database):
        async with database.connection() as conn:
            yield conn
    else:
        async with database.begin() as conn:
            yield conn


def execute(conn: Any, sql: str, params: dict[str, Any]) -> Any:
    """Run on a psycopg Connection or an SQLAlchemy Connection/Session."""
    if _is_sqlalchemy(conn):
        from sqlalchemy import text

        return conn.execute(text(sql), params)
    return conn.execute(_psycopg(sql), params)


async def execute_async(conn: Any, sql: str, params: dict[str, Any]) -> Any:
    """Run on a psycopg AsyncConnection or an SQLAlchemy AsyncConnection/AsyncSession."""
    if _is_sqlalchemy(conn):
        from sqlalchemy import text

        return await conn.execute(text(sql), params)
    return await conn.execute(_psycopg(sql), params)


async def fetchone_async(result: Any) -> Any:
    """The first row of a psycopg AsyncCursor (awaited) or an SQLAlchemy Result (not)."""
    row = result.fetchone()
    return await row if asyncio.iscoroutine(row) else row


def _psycopg(sql: str) -> str:
    return re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql)


def _is_pool(database: Any) -> bool:
    return type(database).__module__.startswith("psycopg_pool")


def _is_sqlalchemy(conn: Any) -> bool:
    return type(conn).__module__.startswith("sqlalchemy")
