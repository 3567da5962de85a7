"""The storage part of the overview: the tables the retention job keeps to size,
the idle consumer groups, and the last retention round of the serving node.

Durations and ages are in seconds (floats), times in ISO 8601 with their offset.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from coordinator.domain.overview import Storage
from coordinator.domain.retention import RetentionResult
from coordinator.views.records import RecordOut


class TableOut(RecordOut):
    table: str = Field(examples=["messages"])
    bytes: int = Field(description="Size on disk, indexes and TOAST included.")
    rows: int = Field(description="Rows as PostgreSQL's planner last estimated them (analyze).")
    oldest_age_seconds: float | None = Field(description="Age of its oldest row; null: empty.")


class IdleConsumerGroupOut(RecordOut):
    consumer_group: str
    last_received_at: datetime = Field(
        description="Its last receive, or its first subscription's creation if it never received."
    )
    pending: int = Field(description="Deliveries it leaves unacked (counted up to 100,000).")


class RetentionRoundOut(BaseModel):
    started_at: datetime | None = Field(description="The round's clock; null: it failed first.")
    duration_seconds: float
    removed: dict[str, int] = Field(
        description="Rows removed by kind: messages (with their history), unacked_deliveries, "
        "dead_letters, consumer_groups.",
        examples=[{"messages": 1200, "unacked_deliveries": 0, "dead_letters": 3}],
    )
    messages_by_state: dict[str, int] = Field(description="Messages removed, by their state.")
    unacked_by_group: dict[str, int] = Field(
        description="Deliveries dropped unacked at unacked_retention_hours, by consumer group."
    )
    dead_letters_by_group: dict[str, int] = Field(
        description="Dead letters removed at dead_letter_retention_hours, by consumer group."
    )
    removed_consumer_groups: list[str] = Field(
        description="Idle consumer groups removed (remove_idle_consumer_groups)."
    )

    @classmethod
    def of(cls, result: RetentionResult) -> RetentionRoundOut:
        return cls(
            started_at=result.started_at,
            duration_seconds=result.duration_seconds,
            removed=result.removed,
            messages_by_state=dict(result.messages),
            unacked_by_group=dict(result.unacked),
            dead_letters_by_group=dict(result.dead_letters),
            removed_consumer_groups=list(result.removed_groups),
        )


class StorageOut(BaseModel):
    tables: list[TableOut] = Field(description="The tables the retention job keeps to size.")
    idle_consumer_groups: list[IdleConsumerGroupOut] = Field(
        description="Consumer groups that have not received for idle_consumer_group_hours."
    )
    retention_enabled: bool = Field(
        description="Whether the process that answered runs retention rounds (retention_enabled)."
    )
    last_round: RetentionRoundOut | None = Field(
        description="The last retention round of the process that answered; null: it has run "
        "none yet (it started less than retention_interval_seconds ago, retention is disabled "
        "there, or it is the CLI). Each node runs its own rounds."
    )

    @classmethod
    def of(cls, storage: Storage) -> StorageOut:
        last = storage.last_round
        return cls(
            tables=[TableOut.of(t) for t in storage.tables],
            idle_consumer_groups=[IdleConsumerGroupOut.of(g) for g in storage.idle_consumer_groups],
            retention_enabled=storage.retention_enabled,
            last_round=RetentionRoundOut.of(last) if last is not None else None,
        )
