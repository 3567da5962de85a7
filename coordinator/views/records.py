"""Models filled from the core's records, and the fields every message carries."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, Field

from coordinator.domain.messages import MessageFields


class RecordOut(BaseModel):
    """A response filled from a record of the core: each field from its attribute of that name.

    Pydantic turns the record's values into the declared types (a state enum
    into its string, a tuple into a list); `given` sets what has no attribute.
    """

    @classmethod
    def of(cls, record: Any, **given: Any) -> Self:
        by_name = {
            name: getattr(record, name)
            for name in cls.model_fields
            if name not in given and hasattr(record, name)
        }
        return cls(**by_name, **given)


class MessageFieldsOut(RecordOut):
    """The common fields as `MessageFields.fields_json()` gives them; subclasses add their own."""

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

    @classmethod
    def of(cls, record: MessageFields, **given: Any) -> Self:
        return super().of(record, **{**record.fields_json(), **given})
