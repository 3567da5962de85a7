"""The connection pool the core runs its named queries on.

While PostgreSQL is away (stopped, restarting, failing over, frozen or cut
off) a request must get a clear answer within a bounded time, and once a
server is back the next requests must succeed at once, without restarting the
coordinator. psycopg's pool alone does neither: a request waits its full
timeout (30 s) and then raises PoolTimeout, connections broken by a restart
are handed out as if alive, a query on a connection to a frozen server waits
for as long as the server is frozen, and reconnection backs off exponentially
(1, 2, 4, 8, 16 s...). Here:

- every failure to reach the database, waiting for a connection or on one
  (psycopg's OperationalError: connection refused or lost, server shutting
  down), becomes DatabaseUnavailable, which each door answers as such (HTTP
  503 `database_unavailable`);
- the wait for a connection is `timeout` seconds (pool_timeout_seconds);
- a connection is held for at most `deadline` seconds (database_deadline_
  seconds) from the moment it was asked for: then its socket is shut down
  (`deadlines.py`), the statement on it fails at once, and the request gets
  DatabaseUnavailable. Closed, never cancelled: a cancel that reaches a
  commit waiting for the synchronous standby makes it commit locally only,
  and a later failover loses it;
- a commit whose wait for the synchronous standby was cancelled anyway (by
  someone else's pg_cancel_backend) is answered as a failure, never a
  success (`durability.py`);
- after a failure, connections are checked (within a bound) before they are
  handed out, for a while, so a connection the restart broke is replaced
  instead of failing a request (checking is a round trip, so not in steady
  state);
- a reconnection gives up after `reconnect_timeout` seconds instead of
  backing off for minutes; the next request then asks for a new connection
  at once, so recovery follows Postgres's return within about a second. A
  URL that names several servers (`target_session_attrs=read-write`) lets
  libpq find the new primary after a failover.

Every connection is pinned to READ COMMITTED, the isolation level the
compare-and-set statements are written for, whatever the database's or the
role's default_transaction_isolation, and to the configured
synchronous_commit (`_configure`).
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

from coordinator.db.connections import CoordinatorConnection, connection_defaults
from coordinator.db.deadlines import severed_after
from coordinator.db.queries import execute
from coordinator.domain.errors import DatabaseUnavailable

# How long after a failure connections are checked before use: long enough
# to flush every connection a restart broke out of an idle pool.
SUSPICION_SECONDS = 30.0
# The longest a check of an idle connection may take before it counts as broken.
CHECK_SECONDS = 2.0
RETRY_ADVICE = (
    "Retry the request: an end, or a message sent with its message_id, is answered "
    "as a repeat if the first attempt was stored."
)


class CoordinatorPool(AsyncConnectionPool[CoordinatorConnection]):
    """An AsyncConnectionPool whose failures are DatabaseUnavailable, bounded in time."""

    def __init__(
        self,
        database_url: str,
        *,
        min_size: int,
        max_size: int,
        timeout: float,
        deadline: float = 30.0,
        synchronous_commit: str | None = "on",
        writes: bool = True,
        name: str = "coordinator",
    ):
        self._suspect_until = 0.0
        self._before_close: list[Callable[[], Awaitable[None]]] = []
        self.deadline = deadline
        self.synchronous_commit = synchronous_commit
        # autocommit: every named query is one statement and so one
        # transaction; functions that need several open a transaction.
        super().__init__(
            conninfo=database_url,
            connection_class=CoordinatorConnection,
            min_size=min_size,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                # libpq's connect_timeout is whole seconds, at least 2, and
                # bounds each host of a multi-host URL in turn.
                "connect_timeout": max(2, math.ceil(timeout)),
                **connection_defaults(database_url, writes=writes),
            },
            configure=self._configure,
            check=self._check_while_suspect,
            timeout=timeout,
            reconnect_timeout=max(timeout, 1.0),
            open=False,
            name=name,
        )

    @asynccontextmanager
    async def connection(
        self, timeout: float | None = None, *, deadline: float | None = None
    ) -> AsyncIterator[CoordinatorConnection]:
        """A connection for at most `deadline` seconds (the pool's by default), wait included."""
        deadline = self.deadline if deadline is None else deadline
        ends_at = monotonic() + deadline
        wait = min(self.timeout if timeout is None else timeout, deadline)
        guard = None
        try:
            async with super().connection(wait) as conn:
                assert isinstance(conn, CoordinatorConnection)
                conn.forget_unconfirmed_commit()
                with severed_after(conn, ends_at - monotonic()) as guard:
                    try:
                        yield conn
                    except psycopg.errors.ReadOnlySqlTransaction:
                        # A standby now (demoted under this connection): it
                        # must not be handed out again.
                        await conn.close()
                        raise
                # The block ended without an error: but a commit in it may
                # have been confirmed only locally (see connections.py).
                conn.raise_if_unconfirmed()
        except PoolTimeout as error:
            self.suspect()
            raise DatabaseUnavailable(
                f"PostgreSQL gave no connection within {wait:g} s; "
                f"it may be down, restarting or failing over. {RETRY_ADVICE}"
            ) from error
        except psycopg.errors.ReadOnlySqlTransaction as error:
            self.suspect()
            raise DatabaseUnavailable(
                "PostgreSQL answered as a read-only standby: it is failing over, or the "
                f"database URL led to a standby. {RETRY_ADVICE}"
            ) from error
        except psycopg.OperationalError as error:
            self.suspect()
            if guard is not None and guard.severed:
                raise DatabaseUnavailable(
                    f"PostgreSQL did not answer within {deadline:g} s "
                    "(database_deadline_seconds); the request's connection was closed. "
                    f"{RETRY_ADVICE}"
                ) from error
            raise DatabaseUnavailable(
                f"PostgreSQL is unavailable ({_first_line(error)}). {RETRY_ADVICE}"
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

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
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
        if self.synchronous_commit is not None:
            # An acknowledged write must be on the synchronous standby, if the
            # server has one, whatever the role's or database's default.
            await execute(conn, "pin_synchronous_commit", {"level": self.synchronous_commit})

    async def _check_while_suspect(self, conn: AsyncConnection[Any]) -> None:
        if monotonic() < self._suspect_until:
            # A frozen server never answers the check: bounded, then broken.
            with severed_after(conn, CHECK_SECONDS):
                await AsyncConnectionPool.check_connection(conn)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
