"""Subscriptions: which consumer group receives which topic (by tag or SQL92 filter), and its lag.

Every door subscribes through here, so a filter is parsed and checked in
one place: a tag expression into its tags, a SQL92 expression into the tree
the fan-out evaluates (coordinator.domain.sql92).
"""

from __future__ import annotations

import json
from typing import Any

from coordinator.core.configs import DeliveryConfig
from coordinator.core.context import CoreContext
from coordinator.db.queries import execute, fetch_all, fetch_one
from coordinator.domain.delivery import ConsumerLag, FilterType, SubscribeResult, Subscription
from coordinator.domain.errors import InvalidMessage, NotFound
from coordinator.domain.records import record_from_row
from coordinator.domain.rules import (
    DEFAULT_MAX_DELIVERY_ATTEMPTS,
    MAX_DELIVERY_ATTEMPTS_LIMIT,
    SUBSCRIBE_ALL,
    check_consumer_group,
    check_count,
    check_filter_type,
    check_topic,
    parse_filter,
)


class Subscriptions:
    def __init__(self, context: CoreContext, config: DeliveryConfig) -> None:
        self._context = context
        self._most = config.max_subscriptions_per_group

    async def subscribe(
        self,
        consumer_group: str,
        topic: str,
        expression: str = SUBSCRIBE_ALL,
        *,
        filter_type: FilterType | str = FilterType.TAG,
        fifo: bool = False,
        max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
    ) -> SubscribeResult:
        """Create or change a subscription; it receives messages committed from now on.

        `expression` is a tag expression ('*', 'TagA || TagB') or, with
        `filter_type` 'sql92', a SQL92 condition ("amount > 100 AND TAGS = 'paid'").
        """
        check_consumer_group(consumer_group)
        check_topic(topic)
        kind, text, tags, tree = parse_filter(expression, filter_type)
        check_count("max delivery attempts", max_delivery_attempts, MAX_DELIVERY_ATTEMPTS_LIMIT)
        async with self._context.pool.connection() as conn, conn.transaction():
            # One subscriber of the group at a time, so that the bound holds.
            await execute(conn, "lock_group_subscriptions", {"consumer_group": consumer_group})
            row = await fetch_one(
                conn,
                "upsert_subscription",
                {
                    "consumer_group": consumer_group,
                    "topic": topic,
                    "expression": text,
                    "tags": list(tags) if tags is not None else None,
                    "filter_type": kind.value,
                    "filter": json.dumps(tree) if tree is not None else None,
                    "fifo": fifo,
                    "max_delivery_attempts": max_delivery_attempts,
                    "max_subscriptions": self._most,
                },
            )
        if row is None:
            raise InvalidMessage(
                f"consumer group {consumer_group!r} subscribes to {self._most} topics already "
                "(max_subscriptions_per_group): unsubscribe one first"
            )
        return SubscribeResult(subscription=_subscription(row), created=row["created"])

    async def ensure_subscribed(
        self,
        consumer_group: str,
        topic: str,
        expression: str = SUBSCRIBE_ALL,
        *,
        filter_type: FilterType | str = FilterType.TAG,
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
        kind, expression, _, _ = parse_filter(expression, filter_type)
        current = {s.topic: s for s in await self.subscriptions(consumer_group)}.get(topic)
        if current is None:
            result = await self.subscribe(
                consumer_group, topic, expression, filter_type=kind, fifo=bool(fifo)
            )
            return result.subscription
        fifo = current.fifo if fifo is None else fifo
        if (current.expression, current.filter_type, current.fifo) == (expression, kind, fifo):
            return current
        result = await self.subscribe(
            consumer_group,
            topic,
            expression,
            filter_type=kind,
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

    # -- lag ------------------------------------------------------------------

    async def lag(self, consumer_group: str | None = None) -> list[ConsumerLag]:
        """Per group and topic: unacked deliveries, in flight, dead letters."""
        if consumer_group is not None:
            check_consumer_group(consumer_group)
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(conn, "consumer_lag", {"consumer_group": consumer_group})
        return [record_from_row(ConsumerLag, row) for row in rows]


def _subscription(row: dict[str, Any]) -> Subscription:
    tags = row["tags"]
    return record_from_row(
        Subscription,
        row,
        tags=tuple(tags) if tags is not None else None,
        filter_type=check_filter_type(row["filter_type"]),
    )
