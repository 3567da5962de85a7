"""Consumer groups as the core holds them: subscriptions, dead letters, lag."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from coordinator.views.records import MessageFieldsOut, RecordOut


class SubscriptionOut(RecordOut):
    consumer_group: str
    topic: str
    expression: str
    tags: list[str] | None = Field(description="The parsed tags; null for '*' and for SQL92.")
    fifo: bool
    max_delivery_attempts: int
    created_at: datetime
    filter_type: Literal["tag", "sql92"] = Field(
        default="tag", description="How `expression` selects messages: by tag or by SQL92."
    )


class SubscriptionsOut(BaseModel):
    subscriptions: list[SubscriptionOut]


class DeadLetterOut(MessageFieldsOut):
    id: int
    consumer_group: str
    attempts: int
    committed_at: datetime
    dead_at: datetime


class DeadLettersOut(BaseModel):
    dead_letters: list[DeadLetterOut]


class ConsumerLagOut(RecordOut):
    consumer_group: str
    topic: str
    lag: int = Field(description="Committed messages not yet acked (in flight included).")
    in_flight: int
    dead_letters: int
    oldest_pending_at: datetime | None


class ConsumerLagsOut(BaseModel):
    lag: list[ConsumerLagOut]
