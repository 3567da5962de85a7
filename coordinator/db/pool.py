"""The connection pool the core runs its named queries on."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from coordinator.db.queries import execute


async def _configure(conn: AsyncConnection[Any]) -> None:
    # Plan every execution for the table as it is now. Prepared statements
    # (psycopg prepares repeated queries) and the triggers' PL/pgSQL switch to
    # a cached generic plan after a few runs; a plan cached while a table was
    # small (a sequential scan) stays until the next ANALYZE, and a table that
    # grows fast from empty made a one-row commit take 40 ms instead of 2 ms
    # (bench/). Our statements are few per request and cheap to plan.
    await execute(conn, "configure_session")


def open_pool(database_url: str, *, min_size: int, max_size: int) -> AsyncConnectionPool:
    # autocommit: every named query is one statement and so one transaction;
    # functions that need several statements open a transaction explicitly.
    return AsyncConnectionPool(
        conninfo=database_url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "row_factory": dict_row},
        configure=_configure,
        open=False,
        name="coordinator",
    )
