"""Delivery of committed messages to consumer groups (RocketMQ 5 SimpleConsumer).

Committed messages become deliveries in the transaction that commits them
(the statement trigger messages_changed on messages). A receive claims a group's oldest
available deliveries with FOR UPDATE SKIP LOCKED, makes them invisible to the
rest of the group for an invisible duration, counts the attempt and issues a
fresh receipt handle. An ack deletes the delivery; one not acked in time is
received again with its attempt count, until the subscription's
max_delivery_attempts is used up and it moves to the group's dead letters.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from psycopg import AsyncConnection

from coordinator import metrics
from coordinator.core.context import CoreContext
from coordinator.db.notifier import DELIVERIES_CHANNEL
from coordinator.db.notifier import Subscription as Waiter
from coordinator.db.queries import fetch_all, fetch_one
from coordinator.domain.delivery import (
    AckOutcome,
    AckResult,
    ConsumerLag,
    DeadLetter,
    InvisibleDurationChange,
    ReceivedMessage,
    SubscribeResult,
    Subscription,
)
from coordinator.domain.errors import (
    CoordinatorError,
    InvalidMessage,
    NotFound,
    ReceiptHandleStale,
)
from coordinator.domain.records import record_from_row
from coordinator.domain.rules import (
    DEAD_LETTERS_PAGE_LIMIT,
    DEFAULT_INVISIBLE_SECONDS,
    DEFAULT_MAX_DELIVERY_ATTEMPTS,
    DEFAULT_MAX_MESSAGES,
    MAX_ACK_BATCH,
    MAX_DELIVERY_ATTEMPTS_LIMIT,
    MAX_MESSAGES_LIMIT,
    MAX_WAIT_SECONDS,
    SUBSCRIBE_ALL,
    check_consumer_group,
    check_count,
    check_invisible_seconds,
    check_seconds,
    check_topic,
    delivery_id_of,
    parse_tag_expression,
)

log = logging.getLogger(__name__)


class Delivery:
    """Subscriptions, receive, ack, invisible durations, dead letters and lag."""

    # How often a waiting receive looks again without being notified: a
    # delivery whose invisible duration ran out is receivable again without
    # any NOTIFY, and without a notifier (CLI) polling is all there is.
    poll_interval_seconds: float = 1.0

    def __init__(self, context: CoreContext) -> None:
        self._context = context

    # -- subscriptions -------------------------------------------------------

    async def subscribe(
        self,
        consumer_group: str,
        topic: str,
        expression: str = SUBSCRIBE_ALL,
        *,
        fifo: bool = False,
        max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
    ) -> SubscribeResult:
        """Create or change a subscription; it receives messages committed from now on."""
        check_consumer_group(consumer_group)
        check_topic(topic)
        tags = parse_tag_expression(expression)
        check_count("max delivery attempts", max_delivery_attempts, MAX_DELIVERY_ATTEMPTS_LIMIT)
        async with self._context.pool.connection() as conn:
            row = await fetch_one(
                conn,
                "upsert_subscription",
                {
                    "consumer_group": consumer_group,
                    "topic": topic,
                    "expression": expression.strip() or SUBSCRIBE_ALL,
                    "tags": list(tags) if tags is not None else None,
                    "fifo": fifo,
                    "max_delivery_attempts": max_delivery_attempts,
                },
            )
        assert row is not None
        return SubscribeResult(subscription=_subscription(row), created=row["created"])

    async def ensure_subscribed(
        self,
        consumer_group: str,
        topic: str,
        expression: str = SUBSCRIBE_ALL,
        *,
        fifo: bool | None = None,
    ) -> Subscription:
        """The group's subscription to `topic` with this expression, changed only if it differs.

        For clients that restate their subscription with every receive (the
        RocketMQ door): an existing subscription keeps its max delivery
        attempts, and its FIFO flag unless `fifo` is given; an unchanged one
        is not written.
        """
        check_consumer_group(consumer_group)
        check_topic(topic)
        expression = expression.strip() or SUBSCRIBE_ALL
        parse_tag_expression(expression)
        current = {s.topic: s for s in await self.subscriptions(consumer_group)}.get(topic)
        if current is None:
            result = await self.subscribe(consumer_group, topic, expression, fifo=bool(fifo))
            return result.subscription
        fifo = current.fifo if fifo is None else fifo
        if current.expression == expression and current.fifo == fifo:
            return current
        result = await self.subscribe(
            consumer_group,
            topic,
            expression,
            fifo=fifo,
            max_delivery_attempts=current.max_delivery_attempts,
        )
        return result.subscription

    async def unsubscribe(self, consumer_group: str, topic: str) -> Subscription:
        """Remove a subscription with its unacked deliveries; its dead letters stay."""
        check_consumer_group(consumer_group)
        check_topic(topic)
        async with self._context.pool.connection() as conn:
            row = await fetch_one(
                conn, "delete_subscription", {"consumer_group": consumer_group, "topic": topic}
            )
        if row is None:
            raise NotFound(f"consumer group {consumer_group!r} does not subscribe to {topic!r}")
        return _subscription(row)

    async def subscriptions(self, consumer_group: str | None = None) -> list[Subscription]:
        if consumer_group is not None:
            check_consumer_group(consumer_group)
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(conn, "list_subscriptions", {"consumer_group": consumer_group})
        return [_subscription(row) for row in rows]

    # -- receive ------------------------------------------------------------

    async def receive(
        self,
        consumer_group: str,
        *,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        invisible_seconds: float = DEFAULT_INVISIBLE_SECONDS,
        wait_seconds: float = 0.0,
        topic: str | None = None,
    ) -> list[ReceivedMessage]:
        """Up to max_messages messages, waiting up to wait_seconds for the first one.

        Returns as soon as at least one message was claimed; an empty list
        once wait_seconds passed without any.
        """
        check_consumer_group(consumer_group)
        if topic is not None:
            check_topic(topic)
        check_count("max messages", max_messages, MAX_MESSAGES_LIMIT)
        check_invisible_seconds(invisible_seconds)
        # The server may hold long polls for less than the protocol allows.
        longest = min(MAX_WAIT_SECONDS, self._context.settings.max_long_poll_seconds)
        check_seconds("wait time", wait_seconds, low=0, high=longest, allow_zero=True)
        async with self._context.pool.connection() as conn:
            row = await fetch_one(
                conn, "count_subscriptions", {"consumer_group": consumer_group, "topic": topic}
            )
        if row is None or row["subscriptions"] == 0:
            what = f"topic {topic!r}" if topic is not None else "any topic"
            raise NotFound(f"consumer group {consumer_group!r} does not subscribe to {what}")

        params = {
            "consumer_group": consumer_group,
            "topic": topic,
            "max_messages": max_messages,
            "invisible_seconds": invisible_seconds,
        }
        deadline = time.monotonic() + wait_seconds
        # Subscribe before the first look: a commit between the look and the
        # wait still wakes us.
        async with self._waiter(consumer_group) as waiter:
            while True:
                received, buried = await self._claim(params)
                if received:
                    return received
                if buried:
                    continue  # the messages behind the buried ones may be receivable
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._context.stopping.is_set():
                    return []
                pause = min(remaining, self.poll_interval_seconds)
                if waiter is None:
                    await asyncio.sleep(pause)
                else:
                    await waiter.wait(pause)

    def _waiter(self, consumer_group: str) -> AbstractAsyncContextManager[Waiter | None]:
        notifier = self._context.notifier
        if notifier is None:
            return nullcontext(None)
        return notifier.subscribe(DELIVERIES_CHANNEL, consumer_group)

    async def _claim(self, params: dict[str, Any]) -> tuple[list[ReceivedMessage], int]:
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(conn, "claim_deliveries", params)
        received = [_received(row) for row in rows if not row["dead_lettered"]]
        if len(received) < len(rows):
            _log_dead_lettered(rows)
        metrics.count_redeliveries(
            params["consumer_group"], sum(1 for m in received if m.delivery_attempt > 1)
        )
        return received, len(rows) - len(received)

    # -- ack and invisible duration -----------------------------------------

    async def ack(self, consumer_group: str, receipt_handle: str) -> None:
        """Ack one message; refused when the handle is stale or unknown."""
        (result,) = await self.ack_batch(consumer_group, [receipt_handle])
        if result.outcome is AckOutcome.STALE:
            raise ReceiptHandleStale(
                f"receipt handle {receipt_handle!r} is stale: the message was received again "
                "(or its invisible duration changed) since it was issued; "
                "only the newest handle acks it"
            )
        if result.outcome is AckOutcome.NOT_FOUND:
            raise NotFound(
                f"consumer group {consumer_group!r} has no unacked message with receipt handle "
                f"{receipt_handle!r}: it was acked already, moved to the dead letters, "
                "or never received"
            )

    async def ack_batch(
        self, consumer_group: str, receipt_handles: Sequence[str]
    ) -> list[AckResult]:
        """Ack many messages at once; each handle gets its own outcome, in order."""
        check_consumer_group(consumer_group)
        if not receipt_handles:
            raise InvalidMessage("give at least one receipt handle")
        if len(receipt_handles) > MAX_ACK_BATCH:
            raise InvalidMessage(
                f"at most {MAX_ACK_BATCH} receipt handles per ack, got {len(receipt_handles)}"
            )
        delivery_ids = [delivery_id_of(handle) for handle in receipt_handles]
        async with self._context.pool.connection() as conn, conn.transaction():
            rows = await fetch_all(
                conn,
                "ack_deliveries",
                {
                    "consumer_group": consumer_group,
                    "delivery_ids": delivery_ids,
                    "receipt_handles": list(receipt_handles),
                },
            )
            if any(row["unblocks_message_group"] for row in rows):
                await _notify(conn, consumer_group)
        return [AckResult(row["receipt_handle"], AckOutcome(row["outcome"])) for row in rows]

    async def change_invisible_duration(
        self, consumer_group: str, receipt_handle: str, invisible_seconds: float
    ) -> InvisibleDurationChange:
        """Invisible for invisible_seconds from now, under a new receipt handle."""
        check_consumer_group(consumer_group)
        check_invisible_seconds(invisible_seconds)
        async with self._context.pool.connection() as conn:
            row = await fetch_one(
                conn,
                "change_invisible_duration",
                {
                    "consumer_group": consumer_group,
                    "delivery_id": delivery_id_of(receipt_handle),
                    "receipt_handle": receipt_handle,
                    "invisible_seconds": invisible_seconds,
                },
            )
        assert row is not None
        if row["receipt_handle"] is not None:
            return InvisibleDurationChange(
                receipt_handle=row["receipt_handle"],
                invisible_until=row["visible_at"],
                delivery_attempt=row["attempts"],
            )
        raise _handle_refused(consumer_group, receipt_handle, found=row["found"])

    async def dead_letter(self, consumer_group: str, receipt_handle: str) -> None:
        """Move one in-flight message to the group's dead letters now, by its receipt handle."""
        check_consumer_group(consumer_group)
        async with self._context.pool.connection() as conn, conn.transaction():
            row = await fetch_one(
                conn,
                "bury_delivery",
                {
                    "consumer_group": consumer_group,
                    "delivery_id": delivery_id_of(receipt_handle),
                    "receipt_handle": receipt_handle,
                },
            )
            assert row is not None
            if row["buried"]:
                if row["unblocks_message_group"]:
                    await _notify(conn, consumer_group)
                return
        raise _handle_refused(consumer_group, receipt_handle, found=row["found"])

    # -- dead letters ---------------------------------------------------------

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
            await _notify(conn, row["consumer_group"])
        return sum(row["requeued"] for row in rows)

    # -- lag ------------------------------------------------------------------

    async def lag(self, consumer_group: str | None = None) -> list[ConsumerLag]:
        """Per group and topic: unacked deliveries, in flight, dead letters."""
        if consumer_group is not None:
            check_consumer_group(consumer_group)
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(conn, "consumer_lag", {"consumer_group": consumer_group})
        return [record_from_row(ConsumerLag, row) for row in rows]


def _log_dead_lettered(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        if row["dead_lettered"]:
            log.info(
                "message %s moved to the dead letters of consumer group %s after %d deliveries",
                row["message_id"],
                row["consumer_group"],
                row["attempts"],
                extra={
                    "message_id": row["message_id"],
                    "transaction_id": row["transaction_id"],
                    "offset": row["message_offset"],
                    "consumer_group": row["consumer_group"],
                    "topic": row["topic"],
                },
            )


def _handle_refused(consumer_group: str, receipt_handle: str, *, found: bool) -> CoordinatorError:
    """Why a receipt handle acted on nothing: stale when its delivery is still there."""
    if found:
        return ReceiptHandleStale(
            f"receipt handle {receipt_handle!r} is stale: the message was received again "
            "(or its invisible duration changed) since it was issued"
        )
    return NotFound(
        f"consumer group {consumer_group!r} has no unacked message with receipt handle "
        f"{receipt_handle!r}"
    )


async def _notify(conn: AsyncConnection[Any], consumer_group: str) -> None:
    # Part of the caller's transaction: receivers wake once it commits.
    await fetch_one(conn, "notify_consumer_group", {"consumer_group": consumer_group})


def _subscription(row: dict[str, Any]) -> Subscription:
    tags = row["tags"]
    return record_from_row(Subscription, row, tags=tuple(tags) if tags is not None else None)


def _received(row: dict[str, Any]) -> ReceivedMessage:
    return ReceivedMessage.from_row(
        row, delivery_attempt=row["attempts"], invisible_until=row["visible_at"]
    )


def _dead_letter(row: dict[str, Any]) -> DeadLetter:
    return DeadLetter.from_row(row)
