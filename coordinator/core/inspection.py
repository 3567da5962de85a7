"""Reading state back: one message with its history, the overall status, the database's health."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from coordinator.core.context import CoreContext
from coordinator.db.queries import fetch_all, fetch_one
from coordinator.domain.access import Principal
from coordinator.domain.errors import AmbiguousMessageId, InvalidMessage, NotFound
from coordinator.domain.messages import (
    HistoryEntry,
    MessageRecord,
    PendingTransaction,
    StateCount,
    Status,
)
from coordinator.domain.records import record_from_row
from coordinator.domain.rules import check_message_id, check_name
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
        producer_group: str | None = None,
        topic: str | None = None,
        reader: Principal | None = None,
    ) -> MessageRecord:
        """One message with its history, by exactly one of its offset, message id
        or transaction id.

        A message id is unique only within its producer group (or, for a message
        sent without one, its topic): `producer_group` or `topic` narrow a
        lookup by id, and one that still matches several messages is refused
        with AmbiguousMessageId. With a `reader`, a message it may not read is
        not found, in the very words of a message that does not exist, so that
        no one learns which ids another producer group uses.
        """
        async with self._context.pool.connection() as conn:
            return await _get_message(
                conn,
                Lookup(offset, message_id, transaction_id, producer_group, topic),
                reader,
            )

    async def status(self) -> Status:
        async with self._context.pool.connection() as conn:
            return await _get_status(conn)

    async def database_ok(self) -> bool:
        try:
            async with self._context.pool.connection(timeout=2.0) as conn:
                await fetch_one(conn, "ping")
        except Exception:  # any failure means "not healthy"; /health reports it
            return False
        return True


@dataclass(frozen=True, slots=True)
class Lookup:
    offset: int | None
    message_id: str | None
    transaction_id: str | None
    producer_group: str | None
    topic: str | None


async def _get_message(
    conn: AsyncConnection[Any], lookup: Lookup, reader: Principal | None
) -> MessageRecord:
    given = [v for v in (lookup.offset, lookup.message_id, lookup.transaction_id) if v is not None]
    if len(given) != 1:
        raise InvalidMessage(
            "look a message up by exactly one of offset, message id, transaction id"
        )
    if lookup.message_id is None and (lookup.producer_group, lookup.topic) != (None, None):
        raise InvalidMessage("a producer group or topic narrows a lookup by message id only")
    if lookup.offset is not None:
        row = await fetch_one(conn, "get_message_by_offset", {"offset": lookup.offset})
        what = f"offset {lookup.offset}"
    elif lookup.message_id is not None:
        row = await _by_message_id(conn, lookup, reader)
        what = f"message id {lookup.message_id!r}"
    else:
        assert lookup.transaction_id is not None
        check_message_id(lookup.transaction_id, "transaction id")
        row = await fetch_one(
            conn, "get_message_by_transaction_id", {"transaction_id": lookup.transaction_id}
        )
        what = f"transaction id {lookup.transaction_id!r}"
    if row is None or (reader is not None and not reader.may_read_message(row["producer_group"])):
        raise NotFound(f"no message with {what}")
    history = await fetch_all(conn, "get_history", {"offset": row["id"]})
    return _record(row, history)


async def _by_message_id(
    conn: AsyncConnection[Any], lookup: Lookup, reader: Principal | None
) -> dict[str, Any] | None:
    """The one message with this id the reader may see, None for none."""
    assert lookup.message_id is not None
    check_message_id(lookup.message_id)
    if lookup.producer_group is not None:
        check_name("producer group", lookup.producer_group)
    if lookup.topic is not None:
        check_name("topic", lookup.topic)
    owners = [
        owner
        for owner in await fetch_all(
            conn,
            "find_message_id_owners",
            {
                "message_id": lookup.message_id,
                "producer_group": lookup.producer_group,
                "topic": lookup.topic,
            },
        )
        if reader is None or reader.may_read_message(owner["producer_group"])
    ]
    if not owners:
        return None
    if len(owners) > 1:
        raise AmbiguousMessageId(_ambiguity(lookup.message_id, owners))
    return await fetch_one(conn, "get_message_by_offset", {"offset": owners[0]["id"]})


AMBIGUITY_LISTED = 10


def _ambiguity(message_id: str, owners: list[dict[str, Any]]) -> str:
    """Which groups and topics use the id (only those the reader may see), to pick one."""
    named = [
        f"producer group {o['producer_group']!r}"
        if o["producer_group"] is not None
        else f"topic {o['topic']!r} (no producer group)"
        for o in owners[:AMBIGUITY_LISTED]
    ]
    more = len(owners) - len(named)
    listed = ", ".join(named) + (f" and {more} more" if more else "")
    return (
        f"message id {message_id!r} is ambiguous: {len(owners)} messages use it, in {listed}; "
        "give the producer group (or, for a message sent without one, the topic)"
    )


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
