"""What producers send and consumers receive, in RocketMQ's terms."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class LocalTransactionState(StrEnum):
    """A producer's answer about its local transaction (RocketMQ's LocalTransactionState)."""

    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"


class SendStatus(StrEnum):
    SEND_OK = "SEND_OK"


@dataclass
class Message:
    """A message to send. After a half message is stored, `message_id`,
    `transaction_id` and `offset` are filled in, so the local transaction
    can key its own records (e.g. a barrier row) by the transaction id."""

    topic: str
    body: bytes | str
    tags: str | None = None
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    message_id: str | None = None
    check_immunity_seconds: float | None = None
    message_group: str | None = None
    # Filled in by the coordinator's answers:
    transaction_id: str | None = None
    offset: int | None = None
    check_count: int | None = None  # on check-backs: how many checks so far
    # Not receivable before this time (a naive datetime is local time) or
    # this many seconds after the send; a half message: nor before its commit.
    deliver_at: datetime | None = None
    delay_seconds: float | None = None
    trace_context: str | None = None  # a W3C traceparent, handed to consumers

    @property
    def body_bytes(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else self.body


@dataclass(frozen=True)
class SendResult:
    send_status: SendStatus
    message_id: str
    offset: int
    transaction_id: str | None = None
    local_state: LocalTransactionState | None = None  # transactional sends only
    created: bool = True  # False when the coordinator returned an earlier send
    recall_handle: str | None = None  # with a delivery time: producer.recall() takes it back


@dataclass(frozen=True)
class RecallResult:
    message_id: str
    offset: int
    topic: str
    changed: bool  # False when it was recalled before


@dataclass(frozen=True)
class ReceivedMessage:
    """A message handed to a consumer; ack it with its receipt handle."""

    message_id: str
    offset: int
    topic: str
    body: bytes
    tags: str | None
    keys: list[str]
    properties: dict[str, str]
    receipt_handle: str
    delivery_attempt: int
    message_group: str | None = None
    born_at: datetime | None = None
    committed_at: datetime | None = None
    deliver_at: datetime | None = None  # the delivery time it was sent with
    trace_context: str | None = None  # the producer's W3C traceparent

    @property
    def text(self) -> str:
        return self.body.decode()
