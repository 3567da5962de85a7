"""Messages as the core takes and returns them, independent of any transport.

`MessageFields` are the fields every view of a stored message carries:
`MessageRecord`, `ReceivedMessage`, `DeadLetter` and `CheckRequest` extend it
with what is their own. A query row becomes one of them with `from_row`, and
`fields_json` is the common part of their JSON bodies, where a body travels
as base64 always and as text too when it is UTF-8.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Self

from coordinator.domain.records import record_from_row
from coordinator.domain.states import MessageKind, MessageState, Resolution, Source


def body_fields(body: bytes) -> dict[str, str | None]:
    try:
        text: str | None = body.decode()
    except UnicodeDecodeError:
        text = None
    return {"body_base64": base64.b64encode(body).decode(), "body_text": text}


@dataclass(frozen=True, slots=True)
class MessageFields:
    offset: int
    message_id: str
    transaction_id: str | None
    producer_group: str | None
    topic: str
    tags: str | None
    keys: tuple[str, ...]
    message_group: str | None
    properties: dict[str, str]
    body: bytes
    born_at: datetime

    @classmethod
    def from_row(
        cls, row: Mapping[str, Any], /, *, offset_column: str = "message_offset", **own: Any
    ) -> Self:
        """The message's fields from a query row, and the subclass's own.

        A subclass's field takes the column of its name unless given in `own`.
        """
        return record_from_row(
            cls,
            row,
            offset=row[offset_column],
            keys=tuple(row["keys"]),
            properties=dict(row["properties"]),
            body=bytes(row["body"]),
            **own,
        )

    def fields_json(self) -> dict[str, Any]:
        """The fields as JSON bodies carry them (the body as `body_base64` and `body_text`).

        `born_at` stays a datetime, for the response models to serialize.
        """
        return {
            "offset": self.offset,
            "message_id": self.message_id,
            "transaction_id": self.transaction_id,
            "producer_group": self.producer_group,
            "topic": self.topic,
            "tags": self.tags,
            "keys": list(self.keys),
            "message_group": self.message_group,
            "properties": dict(self.properties),
            **body_fields(self.body),
            "born_at": self.born_at,
        }


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
    deliver_at: datetime | None = None  # not receivable before (delay/timer message)
    trace_context: str | None = None  # W3C traceparent, handed to consumers


@dataclass(frozen=True, slots=True)
class SendResult:
    """Answer to prepare and send: ids of the stored message."""

    offset: int
    message_id: str
    transaction_id: str | None
    state: MessageState
    created: bool  # False when an earlier send with the same message id is returned
    recall_handle: str | None = None  # a message with a delivery time: recalls it until then


@dataclass(frozen=True, slots=True)
class RecallResult:
    offset: int
    message_id: str
    topic: str
    changed: bool  # False when it was recalled before


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
    deliver_at: datetime | None = None
    trace_context: str | None = None
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
