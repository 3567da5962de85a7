"""The fields every view of a stored message carries, and their one mapping each way.

`MessageRecord`, `ReceivedMessage`, `DeadLetter` and `CheckRequest` extend
`MessageFields` with what is their own; a query row becomes one of them with
`from_row`, and `fields_json` is the common part of their JSON bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

from coordinator.bodies import body_fields


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
        """The message's fields from a query row, plus the subclass's `own` fields."""
        return cls(
            offset=row[offset_column],
            message_id=row["message_id"],
            transaction_id=row["transaction_id"],
            producer_group=row["producer_group"],
            topic=row["topic"],
            tags=row["tags"],
            keys=tuple(row["keys"]),
            message_group=row["message_group"],
            properties=dict(row["properties"]),
            body=bytes(row["body"]),
            born_at=row["born_at"],
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
