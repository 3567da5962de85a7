"""The named-query layer: the one way the coordinator runs its SQL.

Every statement lives in a `.sql` file under `coordinator/db/sql/queries/`,
in blocks headed `-- name: NAME`. Names are unique across the files. Code
runs a statement by name with `execute`, `fetch_all` or `fetch_one` (or
`execute_sync` on a blocking connection, as the Spark jobs' drivers use);
`query` hands out the text where another engine runs it (Spark's JDBC reads).

A block declares what it takes and gives where it is defined: its parameters
are the `%(name)s` placeholders of its text, and a statement that returns
rows lists their columns under its name, on one or more `-- returns:` lines.
tests/unit/test_query_calls.py holds every call site to these declarations and
tests/integration/test_query_columns.py holds the declared columns to what
PostgreSQL describes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor
from psycopg.rows import DictRow

_NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_RETURNS_LINE = re.compile(r"^-- returns: (.+)$", re.MULTILINE)
# psycopg's placeholders: %(name)s, or %(name)b / %(name)t for binary / text
_PARAMETER = re.compile(r"%\((\w+)\)[sbt]")
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


@dataclass(frozen=True)
class NamedQuery:
    """One `-- name:` block: its text, the parameters it takes, the columns it returns."""

    name: str
    text: str
    params: frozenset[str]
    # empty: the statement returns no rows
    returns: tuple[str, ...]


def _declared(name: str, body: str) -> NamedQuery:
    text = body.strip().rstrip(";")
    returns = tuple(
        column.strip()
        for line in _RETURNS_LINE.findall(text)
        for column in line.split(",")
        if column.strip()
    )
    params = frozenset(_PARAMETER.findall(text))
    return NamedQuery(name=name, text=text, params=params, returns=returns)


def parse_named_queries(source: str) -> dict[str, NamedQuery]:
    """The blocks of one `.sql` file by name, each with its declarations."""
    parts = _NAME_LINE.split(source)
    # parts = [preamble, name1, body1, name2, body2, ...]
    queries: dict[str, NamedQuery] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = _declared(name, body)
    return queries


def parse_queries(source: str) -> dict[str, str]:
    """The blocks of one `.sql` file by name, as text."""
    return {name: q.text for name, q in parse_named_queries(source).items()}


@cache
def all_queries() -> dict[str, NamedQuery]:
    folder = files("coordinator.db").joinpath("sql", "queries")
    queries: dict[str, NamedQuery] = {}
    for area in QUERY_FILES:
        found = parse_named_queries(folder.joinpath(f"{area}.sql").read_text())
        for name, declared in found.items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice ({area}.sql)")
            queries[name] = declared
    return queries


def query(name: str) -> str:
    return all_queries()[name].text


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
