"""What a retention round did, and what the tables it keeps to size hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class TableFigures:
    table: str
    bytes: int
    rows: int  # the planner's estimate, refreshed by (auto)analyze
    oldest_age_seconds: float | None  # None: the table is empty


@dataclass(frozen=True, slots=True)
class IdleConsumerGroup:
    consumer_group: str
    last_received_at: datetime  # or its first subscription's creation, if it never received
    pending: int  # deliveries it leaves unacked


@dataclass(slots=True)
class RetentionResult:
    """One round: rows removed by kind, and what the tables hold after it."""

    started_at: datetime | None = None
    duration_seconds: float = 0.0
    # Resolved messages deleted, by state (their history and deliveries went with them).
    messages: dict[str, int] = field(default_factory=dict)
    # Deliveries dropped unacked at unacked_retention_hours, by consumer group.
    unacked: dict[str, int] = field(default_factory=dict)
    # Dead letters deleted at dead_letter_retention_hours, by consumer group.
    dead_letters: dict[str, int] = field(default_factory=dict)
    idle_groups: list[IdleConsumerGroup] = field(default_factory=list)
    removed_groups: list[str] = field(default_factory=list)
    tables: list[TableFigures] = field(default_factory=list)

    @property
    def removed(self) -> dict[str, int]:
        """Rows removed by kind (what the metric counts)."""
        return {
            "messages": sum(self.messages.values()),
            "unacked_deliveries": sum(self.unacked.values()),
            "dead_letters": sum(self.dead_letters.values()),
            "consumer_groups": len(self.removed_groups),
        }

    @property
    def removed_anything(self) -> bool:
        return any(self.removed.values())
