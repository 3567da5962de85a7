"""A stored message with its state and history, as the lookups by id or offset show it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from coordinator.domain.messages import MessageRecord
from coordinator.views.records import MessageFieldsOut, RecordOut


class HistoryOut(RecordOut):
    at: datetime
    source: str
    from_state: str | None
    to_state: str
    detail: str | None


class MessageOut(MessageFieldsOut):
    kind: str
    state: str
    check_count: int
    check_immunity_seconds: float | None
    next_check_at: datetime | None
    resolved_at: datetime | None
    resolution_source: str | None
    deliver_at: datetime | None = None
    trace_context: str | None = None
    history: list[HistoryOut]

    @classmethod
    def of(cls, record: MessageRecord, **given: Any) -> Self:  # type: ignore[override]  # a message's view is made of its whole record
        immunity = record.check_immunity
        return super().of(
            record,
            check_immunity_seconds=immunity.total_seconds() if immunity else None,
            history=[HistoryOut.of(h) for h in record.history],
            **given,
        )
