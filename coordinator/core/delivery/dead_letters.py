"""Dead letters: what a consumer group could not consume, listed and requeued."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from coordinator.core.context import CoreContext
from coordinator.core.delivery.notify import notify_consumer_group
from coordinator.db.queries import fetch_all, fetch_one
from coordinator.domain.delivery import DeadLetter
from coordinator.domain.errors import NotFound
from coordinator.domain.rules import (
    DEAD_LETTERS_PAGE_LIMIT,
    check_consumer_group,
    check_count,
    check_topic,
)


class DeadLetters:
    def __init__(self, context: CoreContext) -> None:
        self._context = context

    async def dead_letters(
        self,
        consumer_group: str | None = None,
        *,
        topic: str | None = None,
        limit: int = 100,
    ) -> list[DeadLetter]:
        """Dead letters, oldest first."""
        if consumer_group is not None:
            check_consumer_group(consumer_group)
        if topic is not None:
            check_topic(topic)
        check_count("limit", limit, DEAD_LETTERS_PAGE_LIMIT)
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(
                conn,
                "list_dead_letters",
                {"consumer_group": consumer_group, "topic": topic, "limit": limit},
            )
        return [_dead_letter(row) for row in rows]

    async def requeue_dead_letter(
        self, dead_letter_id: int, consumer_group: str | None = None
    ) -> None:
        """Deliver one dead letter again, with a fresh attempt count."""
        if consumer_group is not None:
            check_consumer_group(consumer_group)
        async with self._context.pool.connection() as conn, conn.transaction():
            requeued = await self._requeue(
                conn, {"id": dead_letter_id, "consumer_group": consumer_group, "topic": None}
            )
            if requeued:
                return
            row = await fetch_one(conn, "get_dead_letter", {"id": dead_letter_id})
        in_group = f" of consumer group {consumer_group!r}" if consumer_group else ""
        if row is None or (consumer_group is not None and row["consumer_group"] != consumer_group):
            raise NotFound(f"no dead letter {dead_letter_id}{in_group}")
        raise NotFound(
            f"consumer group {row['consumer_group']!r} no longer subscribes to topic "
            f"{row['topic']!r}: subscribe again to requeue dead letter {dead_letter_id}"
        )

    async def requeue_dead_letters(self, consumer_group: str, *, topic: str | None = None) -> int:
        """Deliver all of a group's dead letters (of one topic) again; returns how many."""
        check_consumer_group(consumer_group)
        if topic is not None:
            check_topic(topic)
        async with self._context.pool.connection() as conn, conn.transaction():
            return await self._requeue(
                conn, {"id": None, "consumer_group": consumer_group, "topic": topic}
            )

    async def _requeue(self, conn: AsyncConnection[Any], params: dict[str, Any]) -> int:
        rows = await fetch_all(conn, "requeue_dead_letters", params)
        for row in rows:
            await notify_consumer_group(conn, row["consumer_group"])
        return sum(row["requeued"] for row in rows)


def _dead_letter(row: dict[str, Any]) -> DeadLetter:
    return DeadLetter.from_row(row)
