"""The named-query layer: the one way the coordinator runs its SQL.

Every statement lives in a `.sql` file under `coordinator/db/sql/queries/`,
in blocks headed `-- name: NAME`. Names are unique across the files. Code
runs a statement by name with `execute`, `fetch_all` or `fetch_one` (or
`execute_sync` on a blocking connection, as the Spark jobs' drivers use);
`query` hands out the text where another engine runs it (Spark's JDBC reads).
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import Any

from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor
from psycopg.rows import DictRow

_NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
QUERY_FILES = (
    "session",
    "messages",
    "ending",
    "checkback",
    "delivery",
    "pipeline",
    "tokens",
    "status",
    "retention",
    "barrier",
)


def parse_queries(source: str) -> dict[str, str]:
    parts = _NAME_LINE.split(source)
    # parts = [preamble, name1, body1, name2, body2, ...]
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body.strip().rstrip(";")
    return queries


@cache
def all_queries() -> dict[str, str]:
    folder = files("coordinator.db").joinpath("sql", "queries")
    queries: dict[str, str] = {}
    for area in QUERY_FILES:
        for name, text in parse_queries(folder.joinpath(f"{area}.sql").read_text()).items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice ({area}.sql)")
            queries[name] = text
    return queries


def query(name: str) -> str:
    return all_queries()[name]


async def execute(
    conn: AsyncConnection[Any], name: str, params: dict[str, Any] | None = None
) -> AsyncCursor[Any]:
    return await conn.execute(query(name), params)


async def fetch_all(
    conn: AsyncConnection[Any], name: str, params: dict[str, Any] | None = None
) -> list[DictRow]:
    cursor = await execute(conn, name, params)
    return await cursor.fetchall()


async def fetch_one(
    conn: AsyncConnection[Any], name: str, params: dict[str, Any] | None = None
) -> DictRow | None:
    cursor = await execute(conn, name, params)
    return await cursor.fetchone()


def execute_sync(
    conn: Connection[Any], name: str, params: dict[str, Any] | None = None
) -> Cursor[Any]:
    return conn.execute(query(name), params)
