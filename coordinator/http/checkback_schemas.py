"""Request and response bodies of the producer and check-back routes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from coordinator.http.fields import CheckUrl
from coordinator.http.message_schemas import RequestIn
from coordinator.views.records import MessageFieldsOut


class HeartbeatIn(RequestIn):
    check_url: CheckUrl | None = Field(
        default=None,
        description=(
            "Push: the URL check requests are POSTed to. Absent or null: the instance "
            "pulls them (long poll). Send the same value with every heartbeat."
        ),
        examples=["http://10.0.0.7:9000/check"],
    )


class CheckRequestOut(MessageFieldsOut):
    """A check request: the same JSON object is POSTed to push instances."""

    transaction_id: str
    producer_group: str
    check_count: int = Field(description="This is the message's check number N (1 = first).")


class ChecksOut(BaseModel):
    checks: list[CheckRequestOut]
