"""Reading state back: one message with its history, the overall status, the database's health."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from coordinator.core.context import CoreContext
from coordinator.db.queries import execute, fetch_all, fetch_one
from coordinator.domain.errors import InvalidMessage, NotFound
from coordinator.domain.messages import (
    HistoryEntry,
    MessageRecord,
    PendingTransaction,
    StateCount,
    Status,
)
from coordinator.domain.records import record_from_row
from coordinator.domain.rules import check_message_id
from coordinator.domain.states import MessageKind, MessageState, Source


class Inspection:
    def __init__(self, context: CoreContext) -> None:
        self._context = context

    async def get_message(
        self,
        *,
        offset: int | None = None,
        message_id: str | None = None,
        transaction_id: str | None = None,
    ) -> MessageRecord:
        async with self._context.pool.connection() as conn:
            return await _get_message(
                conn, offset=offset, message_id=message_id, transaction_id=transaction_id
            )

    async def status(self) -> Status:
        async with self._context.pool.connection() as conn:
            return await _get_status(conn)

    async def database_ok(self) -> bool:
        try:
            async with self._context.pool.connection(timeout=2.0) as conn:
                await execute(conn, "ping")
        except Exception:  # any failure means "not healthy"; /health reports it
            return False
        return True


async def _get_message(
    conn: AsyncConnection[Any],
    *,
    offset: int | None = None,
    message_id: str | None = None,
    transaction_id: str | None = None,
) -> MessageRecord:
    given = [v for v in (offset, message_id, transaction_id) if v is not None]
    if len(given) != 1:
        raise InvalidMessage(
            "look a message up by exactly one of offset, message id, transaction id"
        )
    if offset is not None:
        row = await fetch_one(conn, "get_message_by_offset", {"offset": offset})
        what = f"offset {offset}"
    elif message_id is not None:
        check_message_id(message_id)
        row = await fetch_one(conn, "get_message_by_message_id", {"message_id": message_id})
        what = f"message id {message_id!r}"
    else:
        assert transaction_id is not None
        check_message_id(transaction_id, "transaction id")
        row = await fetch_one(
            conn, "get_message_by_transaction_id", {"transaction_id": transaction_id}
        )
        what = f"transaction id {transaction_id!r}"
    if row is None:
        raise NotFound(f"no message with {what}")
    history = await fetch_all(conn, "get_history", {"offset": row["id"]})
    return _record(row, history)


def _record(row: dict[str, Any], history: list[dict[str, Any]]) -> MessageRecord:
    source = row["resolution_source"]
    return MessageRecord.from_row(
        row,
        offset_column="id",
        kind=MessageKind(row["kind"]),
        state=MessageState(row["state"]),
        resolution_source=Source(source) if source else None,
        history=tuple(
            HistoryEntry(
                at=h["at"],
                source=Source(h["source"]),
                from_state=MessageState(h["from_state"]) if h["from_state"] else None,
                to_state=MessageState(h["to_state"]),
                detail=h["detail"],
            )
            for h in history
        ),
    )


async def _get_status(conn: AsyncConnection[Any]) -> Status:
    counts = await fetch_all(conn, "message_counts", {})
    oldest = await fetch_one(conn, "oldest_pending", {})
    return Status(
        counts=tuple(
            record_from_row(StateCount, c, state=MessageState(c["state"]), count=c["messages"])
            for c in counts
        ),
        oldest_pending=(
            record_from_row(PendingTransaction, oldest, offset=oldest["message_offset"])
            if oldest
            else None
        ),
        pending_total=oldest["pending_total"] if oldest else 0,
    )
