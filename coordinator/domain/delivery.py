"""Plain data of delivery (subscriptions, received messages, dead letters, lag).

Independent of any transport, like coordinator.domain.messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from coordinator.domain.messages import MessageFields


class FilterType(StrEnum):
    """How a subscription's expression selects messages (RocketMQ's FilterType)."""

    TAG = "tag"  # '*', 'TagA' or 'TagA || TagB'
    SQL92 = "sql92"  # a condition over properties and TAGS (coordinator.domain.sql92)


@dataclass(frozen=True, slots=True)
class Subscription:
    consumer_group: str
    topic: str
    expression: str  # as given, e.g. "TagA || TagB" or "amount > 100"
    tags: tuple[str, ...] | None  # parsed; None for "*" (every message) and for SQL92
    fifo: bool
    max_delivery_attempts: int
    created_at: datetime
    filter_type: FilterType = FilterType.TAG


@dataclass(frozen=True, slots=True)
class SubscribeResult:
    subscription: Subscription
    created: bool  # False when an existing subscription was changed


@dataclass(frozen=True, slots=True)
class ReceivedMessage(MessageFields):
    """A message handed to one consumer of a group, invisible to the rest until acked."""

    receipt_handle: str  # ack or change the invisible duration with this
    delivery_attempt: int  # 1 on the first delivery, then counts redeliveries
    invisible_until: datetime
    consumer_group: str
    committed_at: datetime
    deliver_at: datetime | None = None  # the delivery time it was sent with, if any
    trace_context: str | None = None  # the producer's W3C traceparent, if any


@dataclass(frozen=True, slots=True)
class InvisibleDurationChange:
    receipt_handle: str  # the new handle; the old one no longer works
    invisible_until: datetime
    delivery_attempt: int


class AckOutcome(StrEnum):
    ACKED = "acked"
    STALE = "stale"  # received again (or its duration changed) since this handle was issued
    NOT_FOUND = "not_found"  # acked already, dead-lettered, or never issued to this group


@dataclass(frozen=True, slots=True)
class AckResult:
    receipt_handle: str
    outcome: AckOutcome


@dataclass(frozen=True, slots=True)
class DeadLetter(MessageFields):
    id: int
    consumer_group: str
    attempts: int
    committed_at: datetime
    dead_at: datetime


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    consumer_group: str
    topic: str
    lag: int  # committed, not yet acked (in flight included)
    in_flight: int
    dead_letters: int
    oldest_pending_at: datetime | None
