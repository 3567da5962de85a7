"""The connection pool the core runs its named queries on.

While PostgreSQL is away (stopped, restarting, unreachable) a request must
get a clear answer within a bounded time, and once it is back the next
requests must succeed at once, without restarting the coordinator. psycopg's
pool alone does neither: a request waits its full timeout (30 s) and then
raises PoolTimeout, connections broken by a restart are handed out as if
alive, and reconnection backs off exponentially (1, 2, 4, 8, 16 s...), so
after a 20 s outage the pool kept requests waiting ~8 s more. Here:

- every failure to reach the database, waiting for a connection or on one
  (psycopg's OperationalError: connection refused or lost, server shutting
  down), becomes DatabaseUnavailable, which each door answers as such (HTTP
  503 `database_unavailable`);
- the wait for a connection is `timeout` seconds (the setting
  pool_timeout_seconds);
- after a failure, connections are checked before they are handed out, for
  a while, so a connection the restart broke is replaced instead of failing
  a request (checking is a round trip, so not in steady state);
- a reconnection gives up after `reconnect_timeout` seconds instead of
  backing off for minutes; the next request then asks for a new connection
  at once, so recovery follows Postgres's return within about a second.

Every connection is pinned to READ COMMITTED, the isolation level the
compare-and-set statements are written for, whatever the database's or the
role's default_transaction_isolation (`_configure`).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from time import monotonic
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from coordinator.db.queries import execute
from coordinator.domain.errors import DatabaseUnavailable

# How long after a failure connections are checked before use: long enough
# to flush every connection a restart broke out of an idle pool.
SUSPICION_SECONDS = 30.0


async def _configure(conn: AsyncConnection[Any]) -> None:
    # Plan every execution for the table as it is now. Prepared statements
    # (psycopg prepares repeated queries) and the triggers' PL/pgSQL switch to
    # a cached generic plan after a few runs; a plan cached while a table was
    # small (a sequential scan) stays until the next ANALYZE, and a table that
    # grows fast from empty made a one-row commit take 40 ms instead of 2 ms
    # (bench/). Our statements are few per request and cheap to plan.
    await execute(conn, "configure_session")
    # Whatever the database's or role's default: every statement on the pool,
    # autocommit or inside conn.transaction(), runs READ COMMITTED unless its
    # transaction sets another level (session.sql says why).
    await execute(conn, "pin_read_committed")


class CoordinatorPool(AsyncConnectionPool):
    """An AsyncConnectionPool whose failures are DatabaseUnavailable, bounded in time."""

    def __init__(self, database_url: str, *, min_size: int, max_size: int, timeout: float):
        self._suspect_until = 0.0
        self._before_close: list[Callable[[], Awaitable[None]]] = []
        # autocommit: every named query is one statement and so one
        # transaction; functions that need several open a transaction.
        super().__init__(
            conninfo=database_url,
            min_size=min_size,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                # libpq's connect_timeout is whole seconds, and at least 2
                "connect_timeout": max(2, math.ceil(timeout)),
            },
            configure=_configure,
            check=self._check_while_suspect,
            timeout=timeout,
            reconnect_timeout=max(timeout, 1.0),
            open=False,
            name="coordinator",
        )

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[AsyncConnection]:
        try:
            async with super().connection(timeout) as conn:
                yield conn
        except PoolTimeout as error:
            self.suspect()
            waited = self.timeout if timeout is None else timeout
            raise DatabaseUnavailable(
                f"PostgreSQL gave no connection within {waited:g} s; "
                "it may be down or restarting. Retry the request."
            ) from error
        except psycopg.OperationalError as error:
            self.suspect()
            raise DatabaseUnavailable(
                f"PostgreSQL is unavailable ({_first_line(error)}). Retry the request: "
                "an end, or a message sent with its message_id, is answered as a repeat "
                "if the first attempt was stored."
            ) from error

    def before_close(self, finish: Callable[[], Awaitable[None]]) -> None:
        """Await `finish` when the pool closes, before its connections go.

        For work that runs on the pool in the background (check-back pushes
        in flight record their outcome): whoever closes the pool ends it first.
        """
        self._before_close.append(finish)

    async def close(self, timeout: float = 5.0) -> None:
        finishing, self._before_close = self._before_close, []
        for finish in finishing:
            await finish()
        await super().close(timeout)

    def suspect(self) -> None:
        """Check connections before use for a while: a failure may have broken others."""
        self._suspect_until = monotonic() + SUSPICION_SECONDS

    async def _check_while_suspect(self, conn: AsyncConnection[Any]) -> None:
        if monotonic() < self._suspect_until:
            await AsyncConnectionPool.check_connection(conn)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def open_pool(
    database_url: str, *, min_size: int, max_size: int, timeout: float
) -> CoordinatorPool:
    return CoordinatorPool(database_url, min_size=min_size, max_size=max_size, timeout=timeout)
