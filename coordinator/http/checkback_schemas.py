"""Request and response bodies of the producer and check-back routes."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, WithJsonSchema

from coordinator.domain.check_sources import DEFAULT_BARRIER_TABLE
from coordinator.domain.check_urls import CHECK_URL_MAX_LENGTH
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


class CheckSourceIn(RequestIn):
    # Checked by the core (400 with a sentence); the schema documents the rules.
    database_url: Annotated[
        str, WithJsonSchema({"type": "string", "maxLength": CHECK_URL_MAX_LENGTH})
    ] = Field(
        description=(
            "libpq URL of the producer group's database (postgresql://USER:PASSWORD@HOST:PORT/DB). "
            "Its password is stored encrypted and never shown; the host is held to the check "
            "URLs' rules (no link-local or metadata address)."
        ),
        examples=["postgresql://checker:secret@10.0.0.5:5432/orders"],
    )
    barrier_table: str = Field(
        default=DEFAULT_BARRIER_TABLE,
        description="The barrier table (the SDK's Barrier DDL), table or schema.table.",
    )
    mode: Annotated[str, WithJsonSchema({"type": "string", "enum": ["fallback", "only"]})] = Field(
        default="fallback",
        description=(
            "fallback: the database answers only while the group has no live instance; "
            "only: it answers every check-back of the group."
        ),
    )
