"""Receiving: claim deliveries for a consumer group, ack them, change their
invisible duration, or bury one by its receipt handle."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from coordinator.core.configs import DeliveryConfig
from coordinator.core.context import CoreContext
from coordinator.core.delivery.notify import notify_consumer_group
from coordinator.db.notifier import DELIVERIES_CHANNEL
from coordinator.db.notifier import Subscription as Waiter
from coordinator.db.queries import fetch_all, fetch_one
from coordinator.domain.delivery import (
    AckOutcome,
    AckResult,
    InvisibleDurationChange,
    ReceivedMessage,
)
from coordinator.domain.errors import (
    CoordinatorError,
    InvalidMessage,
    NotFound,
    ReceiptHandleStale,
)
from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.rules import (
    DEFAULT_INVISIBLE_SECONDS,
    DEFAULT_MAX_MESSAGES,
    MAX_ACK_BATCH,
    MAX_MESSAGES_LIMIT,
    check_consumer_group,
    check_count,
    check_invisible_seconds,
    check_seconds,
    check_topic,
    delivery_id_of,
)

log = logging.getLogger(__name__)


class Receiving:
    # How often a waiting receive looks again without being notified: a
    # delivery whose invisible duration ran out is receivable again without
    # any NOTIFY, and without a notifier (CLI) polling is all there is.
    poll_interval_seconds: float = 1.0

    def __init__(self, context: CoreContext, config: DeliveryConfig) -> None:
        self._context = context
        self._config = config
        # Groups whose receives asked since the retention job last took them
        # (it records them as subscriptions.last_received_at): a set add per
        # receive, not a write. Subscribed groups only, so it stays bounded.
        self._received_groups: set[str] = set()

    def take_received_groups(self) -> list[str]:
        """The consumer groups that received since the previous call (the retention job's)."""
        groups = sorted(self._received_groups)
        self._received_groups.clear()
        return groups

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
        longest = min(LONGEST_POLL_SECONDS, self._config.max_long_poll_seconds)
        check_seconds("wait time", wait_seconds, low=0, high=longest, allow_zero=True)
        async with self._context.pool.connection() as conn:
            row = await fetch_one(
                conn, "count_subscriptions", {"consumer_group": consumer_group, "topic": topic}
            )
        if row is None or row["subscriptions"] == 0:
            what = f"topic {topic!r}" if topic is not None else "any topic"
            raise NotFound(f"consumer group {consumer_group!r} does not subscribe to {what}")
        self._received_groups.add(consumer_group)

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
                if waiter is not None:
                    pause = min(pause, await self._until_next_delayed(params))
                if waiter is None:
                    await asyncio.sleep(pause)
                else:
                    await waiter.wait(pause)

    def _waiter(self, consumer_group: str) -> AbstractAsyncContextManager[Waiter | None]:
        notifier = self._context.notifier
        if notifier is None:
            return nullcontext(None)
        return notifier.subscribe(DELIVERIES_CHANNEL, consumer_group)

    async def _until_next_delayed(self, params: dict[str, Any]) -> float:
        """Seconds until the group's next delayed delivery is due (inf: none).

        A delayed delivery becomes visible with no NOTIFY; its commit's
        NOTIFY woke this receive, which now sleeps until then.
        """
        async with self._context.pool.connection() as conn:
            row = await fetch_one(
                conn,
                "next_delayed_delivery",
                {"consumer_group": params["consumer_group"], "topic": params["topic"]},
            )
        seconds = None if row is None else row["seconds"]
        # A little after the due time: the claim compares with its own now().
        return float("inf") if seconds is None else max(seconds, 0.0) + 0.005

    async def _claim(self, params: dict[str, Any]) -> tuple[list[ReceivedMessage], int]:
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(conn, "claim_deliveries", params)
        received = [_received(row) for row in rows if not row["dead_lettered"]]
        if len(received) < len(rows):
            _log_dead_lettered(rows)
        self._context.meter.redelivered(
            params["consumer_group"],
            sum(1 for m in received if m.delivery_attempt > 1),
            self._config.max_metric_label_values,
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
                await notify_consumer_group(conn, consumer_group)
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
                    await notify_consumer_group(conn, consumer_group)
                return
        raise _handle_refused(consumer_group, receipt_handle, found=row["found"])


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


def _received(row: dict[str, Any]) -> ReceivedMessage:
    return ReceivedMessage.from_row(
        row, delivery_attempt=row["attempts"], invisible_until=row["visible_at"]
    )
