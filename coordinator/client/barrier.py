"""The barrier helper: check-backs that answer themselves (DTM's barrier trick).

For a producer whose local transaction runs in PostgreSQL. Inside the local
transaction, `mark_committed` inserts a row keyed by the transaction id into
the producer's own database. A check-back then needs no user code: `check`
inserts a `rolled_back` marker for the same key, ignoring a conflict, and reads
which row won:

- the local transaction committed: its `committed` row is there -> COMMIT;
- it rolled back or never ran: the marker is inserted -> ROLLBACK, and a late
  local transaction now fails on the primary key, so it can never commit;
- it is still running: the insert waits on the key until it ends, then one
  of the two cases above applies.

Call `mark_committed` first in the local transaction, so a concurrent check
waits for the whole transaction rather than racing its business writes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Generic, TypeVar

from coordinator.client._base import Survived, survive_errors
from coordinator.client._databases import execute, execute_async, fetchone_async, plain_table_name
from coordinator.client.listener import AsyncTransactionListener, TransactionListener
from coordinator.client.message import LocalTransactionState, Message

log = logging.getLogger(__name__)

DEFAULT_TABLE = "coordinator_barrier"


class Barrier:
    def __init__(self, table: str = DEFAULT_TABLE) -> None:
        plain_table_name(table, "barrier")
        self.table = table

    def ddl(self) -> str:
        """The barrier table, for your own migrations."""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} (\n"
            "    transaction_id text PRIMARY KEY,\n"
            "    outcome text NOT NULL CHECK (outcome IN ('committed', 'rolled_back')),\n"
            "    created_at timestamptz NOT NULL DEFAULT now()\n"
            ")"
        )

    @property
    def _mark_sql(self) -> str:
        return f"INSERT INTO {self.table} (transaction_id, outcome) VALUES (:tid, 'committed')"

    @property
    def _marker_sql(self) -> str:
        return (
            f"INSERT INTO {self.table} (transaction_id, outcome) VALUES (:tid, 'rolled_back') "
            "ON CONFLICT (transaction_id) DO NOTHING"
        )

    @property
    def _read_sql(self) -> str:
        return f"SELECT outcome FROM {self.table} WHERE transaction_id = :tid"

    # sync: psycopg Connection, or SQLAlchemy Connection / Session ------------
    def create_table(self, conn: Any) -> None:
        execute(conn, self.ddl(), {})

    def mark_committed(self, conn: Any, transaction_id: str) -> None:
        """Inside the local transaction: it commits with it, or not at all."""
        execute(conn, self._mark_sql, {"tid": transaction_id})

    def check(self, conn: Any, transaction_id: str) -> LocalTransactionState:
        """Decide a check-back. Run in a transaction of its own; commit it afterwards."""
        execute(conn, self._marker_sql, {"tid": transaction_id})
        row = execute(conn, self._read_sql, {"tid": transaction_id}).fetchone()
        return _state(row)

    # asyncio: psycopg AsyncConnection ----------------------------------------
    async def create_table_async(self, conn: Any) -> None:
        await execute_async(conn, self.ddl(), {})

    async def mark_committed_async(self, conn: Any, transaction_id: str) -> None:
        await execute_async(conn, self._mark_sql, {"tid": transaction_id})

    async def check_async(self, conn: Any, transaction_id: str) -> LocalTransactionState:
        await execute_async(conn, self._marker_sql, {"tid": transaction_id})
        cursor = await execute_async(conn, self._read_sql, {"tid": transaction_id})
        return _state(await fetchone_async(cursor))


def _state(row: Any) -> LocalTransactionState:
    if row is not None and row[0] == "committed":
        return LocalTransactionState.COMMIT
    return LocalTransactionState.ROLLBACK


LocalTransaction = Callable[[Any, Message, Any], None]
AsyncLocalTransaction = Callable[[Any, Message, Any], Awaitable[None]]

D = TypeVar("D")
F = TypeVar("F", LocalTransaction, AsyncLocalTransaction)

# Nothing was committed when the local transaction raised: ROLLBACK is safe to
# answer (a check-back's marker makes the barrier insert fail, which also
# lands here).
_running = partial(survive_errors, log, "local transaction %s failed; rolling back")
# The commit's outcome is unknown; the barrier will tell at check time.
_committing = partial(survive_errors, log, "commit of local transaction %s failed")


def _after_commit(commit: Survived) -> LocalTransactionState:
    return LocalTransactionState.UNKNOWN if commit.failed else LocalTransactionState.COMMIT


class _BarrierListener(Generic[D, F]):
    local_transaction: F

    def __init__(self, database: D, local_transaction: F, barrier: Barrier | None = None) -> None:
        self.database = database
        self.local_transaction = local_transaction
        self.barrier = barrier or Barrier()


class BarrierTransactionListener(_BarrierListener[Any, LocalTransaction], TransactionListener):
    """A ready-made listener: your local transaction plus the barrier; checks answer themselves.

    `database` is an SQLAlchemy Engine or a libpq URL (psycopg).
    `local_transaction(conn, msg, arg)` does your business writes on `conn`,
    inside the same database transaction as the barrier row.
    """

    def _connect(self) -> Any:
        if isinstance(self.database, str):
            import psycopg

            return psycopg.connect(self.database)
        return self.database.connect()  # SQLAlchemy Engine: a transaction begins on first use

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        assert msg.transaction_id is not None
        conn = self._connect()
        try:
            with _running(msg.transaction_id) as local:
                self.barrier.mark_committed(conn, msg.transaction_id)
                self.local_transaction(conn, msg, arg)
            if local.failed:
                conn.rollback()
                return LocalTransactionState.ROLLBACK
            with _committing(msg.transaction_id) as commit:
                conn.commit()
            return _after_commit(commit)
        finally:
            conn.close()

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        assert msg.transaction_id is not None
        conn = self._connect()
        try:
            state = self.barrier.check(conn, msg.transaction_id)
            conn.commit()
            return state
        finally:
            conn.close()


class AsyncBarrierTransactionListener(
    _BarrierListener[str, AsyncLocalTransaction], AsyncTransactionListener
):
    """The asyncio twin, over psycopg's AsyncConnection (`database` is a libpq URL)."""

    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        import psycopg

        assert msg.transaction_id is not None
        async with await psycopg.AsyncConnection.connect(self.database) as conn:
            with _running(msg.transaction_id) as local:
                await self.barrier.mark_committed_async(conn, msg.transaction_id)
                await self.local_transaction(conn, msg, arg)
            if local.failed:
                await conn.rollback()
                return LocalTransactionState.ROLLBACK
            with _committing(msg.transaction_id) as commit:
                await conn.commit()
            return _after_commit(commit)

    async def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        import psycopg

        assert msg.transaction_id is not None
        async with await psycopg.AsyncConnection.connect(self.database) as conn:
            state = await self.barrier.check_async(conn, msg.transaction_id)
            await conn.commit()
            return state
