"""Recalling a delayed message before its delivery time (RocketMQ 5.3's RecallMessage).

A recall takes the message's deliveries away and writes `recalled` in its
history, in one transaction that first locks the message (against its
commit and another recall) and then its deliveries (waiting for a receive
that holds one), and reads the clock only after: so a recall that succeeds
was early enough that no consumer got the message, and none ever will.
Only a committed message can be recalled; a half message is rolled back
instead. A repeated recall succeeds without changing anything.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from psycopg import AsyncConnection

from coordinator.db.queries import execute, fetch_one
from coordinator.domain.delivery_time import RecallHandle
from coordinator.domain.errors import InvalidMessage, NotFound, StateConflict
from coordinator.domain.messages import RecallResult
from coordinator.domain.states import MessageState


async def recall(conn: AsyncConnection[Any], handle: RecallHandle) -> RecallResult:
    async with conn.transaction():
        row = await fetch_one(conn, "lock_recall_target", {"offset": handle.offset})
        if row is None or row["topic"] != handle.topic or row["message_id"] != handle.message_id:
            raise NotFound("no message for this recall handle on topic " + repr(handle.topic))
        result = RecallResult(
            offset=row["id"], message_id=row["message_id"], topic=row["topic"], changed=False
        )
        if row["recalled"]:
            return result
        if row["deliver_at"] is None:
            raise InvalidMessage(
                f"message {row['message_id']!r} was sent without a delivery time: "
                "only a delay or timer message can be recalled"
            )
        state = MessageState(row["state"])
        if state is MessageState.PREPARED:
            raise StateConflict(
                f"message {row['message_id']!r} is a half message not yet committed: "
                "roll its transaction back instead of recalling it",
                current_state=state.value,
            )
        if state is not MessageState.COMMITTED:
            raise StateConflict(
                f"message {row['message_id']!r} is {state.value}: it is never delivered, "
                "there is nothing to recall",
                current_state=state.value,
            )
        locks = await fetch_one(
            conn,
            "lock_recall_deliveries",
            {"offset": row["id"], "deliver_at": row["deliver_at"]},
        )
        assert locks is not None
        if locks["received"] or not locks["ahead"]:
            raise StateConflict(
                f"message {row['message_id']!r} was already delivered (its delivery time "
                f"{row['deliver_at'].isoformat()} has come): it can no longer be recalled",
                current_state=state.value,
            )
        await execute(conn, "recall_message", {"offset": row["id"]})
        return replace(result, changed=True)
