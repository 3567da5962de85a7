"""Plain data that crosses the core's boundary, independent of any transport."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from coordinator.message_fields import MessageFields
from coordinator.states import MessageKind, MessageState, Resolution, Source


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message as a producer sends it (half or normal)."""

    topic: str
    body: bytes
    producer_group: str | None = None
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    message_id: str | None = None  # supplied by the producer for idempotent retries
    check_immunity_seconds: float | None = None  # CHECK_IMMUNITY_TIME_IN_SECONDS
    message_group: str | None = None  # FIFO key; messages of one group keep commit order


@dataclass(frozen=True, slots=True)
class SendResult:
    """Answer to prepare and send: ids of the stored message."""

    offset: int
    message_id: str
    transaction_id: str | None
    state: MessageState
    created: bool  # False when an earlier send with the same message id is returned


@dataclass(frozen=True, slots=True)
class EndRequest:
    transaction_id: str
    producer_group: str
    resolution: Resolution
    from_check: bool = False
    message_id: str | None = None  # when given it must match the transaction's message


@dataclass(frozen=True, slots=True)
class EndResult:
    offset: int
    message_id: str
    transaction_id: str
    state: MessageState
    changed: bool  # False for UNKNOWN and for a repeated identical resolution


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    at: datetime
    source: Source
    from_state: MessageState | None
    to_state: MessageState
    detail: str | None


@dataclass(frozen=True, slots=True)
class MessageRecord(MessageFields):
    kind: MessageKind
    state: MessageState
    check_count: int
    check_immunity: timedelta | None
    next_check_at: datetime | None
    resolved_at: datetime | None
    resolution_source: Source | None
    history: tuple[HistoryEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class StateCount:
    producer_group: str | None
    topic: str
    state: MessageState
    count: int
    oldest_born_at: datetime


@dataclass(frozen=True, slots=True)
class PendingTransaction:
    offset: int
    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    age: timedelta
    check_count: int
    next_check_at: datetime | None


@dataclass(frozen=True, slots=True)
class Status:
    counts: tuple[StateCount, ...]
    oldest_pending: PendingTransaction | None
    pending_total: int
