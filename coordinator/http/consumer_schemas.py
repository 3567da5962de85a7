"""Request and response bodies of the consumer routes (subscribe, receive, ack, ...).

Limits (max messages, durations, attempts) are checked in the core, so a
value out of range is a 400 with a sentence, like every other rule.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, StrictBool

from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.rules import (
    DEFAULT_INVISIBLE_SECONDS,
    DEFAULT_MAX_DELIVERY_ATTEMPTS,
    DEFAULT_MAX_MESSAGES,
    MAX_ACK_BATCH,
    MAX_DELIVERY_ATTEMPTS_LIMIT,
    MAX_INVISIBLE_SECONDS,
    MAX_MESSAGES_LIMIT,
)
from coordinator.http.fields import (
    DeliveryAttempts,
    Expression,
    InvisibleSeconds,
    MaxMessages,
    ReceiptHandle,
    ReceiptHandles,
    Topic,
    WaitSeconds,
)
from coordinator.http.message_schemas import RequestIn
from coordinator.views.consumers import SubscriptionOut
from coordinator.views.records import MessageFieldsOut, RecordOut


class SubscriptionIn(RequestIn):
    expression: Expression = Field(
        default="*",
        description=(
            "Tag filter: '*' (every message), 'TagA', or 'TagA || TagB'; with "
            "filter_type 'sql92', a SQL92 condition over properties and TAGS, "
            "e.g. \"amount > 100 AND TAGS IN ('paid')\"."
        ),
        examples=["created || paid"],
    )
    filter_type: Literal["tag", "sql92"] = Field(
        default="tag",
        description="How `expression` selects messages: by tag (the default) or by SQL92.",
    )
    fifo: StrictBool = Field(
        default=False,
        description="Deliver messages of one message group one at a time, in commit order.",
    )
    max_delivery_attempts: DeliveryAttempts = Field(
        default=DEFAULT_MAX_DELIVERY_ATTEMPTS,
        description=(
            "Deliveries before a message moves to the dead letters "
            f"(1 to {MAX_DELIVERY_ATTEMPTS_LIMIT})."
        ),
    )


class SubscribeOut(SubscriptionOut):
    created: bool = Field(description="False when an existing subscription was changed.")


class ReceiveIn(RequestIn):
    max_messages: MaxMessages = Field(
        default=DEFAULT_MAX_MESSAGES, description=f"1 to {MAX_MESSAGES_LIMIT}."
    )
    invisible_seconds: InvisibleSeconds = Field(
        default=DEFAULT_INVISIBLE_SECONDS,
        description="How long the messages stay invisible to the rest of the group "
        f"(more than 0, at most {MAX_INVISIBLE_SECONDS:g}).",
    )
    wait_seconds: WaitSeconds = Field(
        default=0,
        description=(
            "Long polling: wait up to this long for a first message "
            f"(0 to {LONGEST_POLL_SECONDS:g}; "
            "the server's max_long_poll_seconds may be lower)."
        ),
    )
    topic: Topic | None = Field(default=None, description="Only this subscribed topic.")


class ReceivedMessageOut(MessageFieldsOut):
    receipt_handle: str
    delivery_attempt: int = Field(description="1 on the first delivery.")
    invisible_until: datetime
    consumer_group: str
    committed_at: datetime
    deliver_at: datetime | None = Field(
        default=None, description="The delivery time it was sent with, if any."
    )
    trace_context: str | None = Field(
        default=None, description="The producer's W3C traceparent, if it sent one."
    )


class ReceiveOut(BaseModel):
    messages: list[ReceivedMessageOut]


class AckIn(RequestIn):
    receipt_handle: ReceiptHandle


class AckOut(RecordOut):
    receipt_handle: str
    outcome: Literal["acked", "stale", "not_found"]


class AckBatchIn(RequestIn):
    receipt_handles: ReceiptHandles = Field(description=f"1 to {MAX_ACK_BATCH} receipt handles.")


class AckBatchOut(BaseModel):
    results: list[AckOut]


class ChangeInvisibleDurationIn(RequestIn):
    receipt_handle: ReceiptHandle
    invisible_seconds: InvisibleSeconds = Field(
        description=f"From now; more than 0, at most {MAX_INVISIBLE_SECONDS:g}."
    )


class ChangeInvisibleDurationOut(RecordOut):
    receipt_handle: str = Field(description="The new handle; the old one no longer works.")
    invisible_until: datetime
    delivery_attempt: int


class RequeueAllIn(RequestIn):
    topic: Topic | None = Field(default=None, description="Only this topic's dead letters.")


class RequeueOut(BaseModel):
    requeued: int
