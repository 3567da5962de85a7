"""The JSON fields every message body carries (coordinator.domain.messages, as responses)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class MessageFieldsOut(BaseModel):
    """Filled from `MessageFields.fields_json()`; subclasses add what is their own."""

    offset: int
    message_id: str
    transaction_id: str | None
    producer_group: str | None
    topic: str
    tags: str | None
    keys: list[str]
    message_group: str | None
    properties: dict[str, str]
    body_base64: str
    body_text: str | None = Field(description="The body as UTF-8 text; null when it is not.")
    born_at: datetime
