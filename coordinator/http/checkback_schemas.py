"""Request and response bodies of the producer and check-back routes."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from coordinator.http.fields import CheckUrl
from coordinator.http.message_schemas import MessageFieldsOut, RecordOut, RequestIn


class HeartbeatIn(RequestIn):
    check_url: CheckUrl | None = Field(
        default=None,
        description=(
            "Push: the URL check requests are POSTed to. Absent or null: the instance "
            "pulls them (long poll). Send the same value with every heartbeat."
        ),
        examples=["http://10.0.0.7:9000/check"],
    )


class ProducerOut(RecordOut):
    producer_group: str
    instance_id: str
    check_url: str | None
    mode: Literal["pull", "push"]
    registered_at: datetime
    last_seen_at: datetime
    live: bool
    ttl_seconds: float = Field(
        description="Not heard from for this long, the instance is not live: heartbeat well within."
    )


class ProducersOut(BaseModel):
    producers: list[ProducerOut]


class CheckRequestOut(MessageFieldsOut):
    """A check request: the same JSON object is POSTed to push instances."""

    transaction_id: str
    producer_group: str
    check_count: int = Field(description="This is the message's check number N (1 = first).")


class ChecksOut(BaseModel):
    checks: list[CheckRequestOut]
