"""The overview: the body of GET /v1/overview (read by the status page) and of
`coordinator status --json`.

Durations are in seconds (floats), times in ISO 8601 with their offset.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from coordinator.domain.overview import COUNT_LIMIT, RECENT_CHECK_SECONDS, Overview
from coordinator.domain.states import CheckStatus
from coordinator.views.records import RecordOut
from coordinator.views.storage import StorageOut


class AgeBucketOut(RecordOut):
    label: str = Field(examples=["1 - 5 min"])
    min_seconds: float
    max_seconds: float | None = Field(description="null: no upper bound.")
    messages: int


class PendingGroupOut(BaseModel):
    producer_group: str
    topic: str
    pending: int = Field(description="Half messages still prepared.")
    due: int = Field(description="Of which due for a check-back now.")
    oldest_age_seconds: float


class OldHalfMessageOut(BaseModel):
    offset: int
    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    born_at: datetime
    age_seconds: float
    check_count: int = Field(description="Check-backs made so far.")
    next_check_at: datetime | None
    check_status: CheckStatus | None = Field(
        description="Where its latest check-back stands; null: not checked back yet."
    )
    check_detail: str | None = Field(description="Why the latest push failed, if it did.")


class MinuteOut(RecordOut):
    minute: datetime = Field(description="The minute's start.")
    committed: int
    rolled_back: int
    discarded: int
    expired: int
    by_check: int = Field(
        description="Of the committed and rolled back: by a producer answering a check-back."
    )


class CheckBackGroupOut(RecordOut):
    producer_group: str
    pending: int = Field(description="Pending half messages of the group.")
    due: int = Field(description="Of which due for a check-back now.")
    open: int = Field(description="Check requests claimed, not yet handed over.")
    delivered: int = Field(description="Handed to an instance; no answer yet.")
    failed: int = Field(description="Pushes without a 2xx answer, waiting for the next check.")
    no_producer: int = Field(description="Due while no instance of the group was live.")
    checked_recently: int = Field(
        description=f"Check-backs claimed in the last {RECENT_CHECK_SECONDS:g} seconds."
    )
    last_failure: str | None = Field(description="The latest failed push's reason.")
    live_producers: int


class ProducerGroupOut(RecordOut):
    producer_group: str
    live: int = Field(description="Instances heard from within producer_ttl_seconds.")
    registered: int
    check_source_mode: str | None = Field(
        default=None,
        description="fallback or only when the group's own database answers its check-backs.",
    )
    check_source_checked_at: datetime | None = Field(
        default=None, description="When the group's database was last asked."
    )
    check_source_ok: bool | None = Field(
        default=None, description="Whether that check got the barrier's answer."
    )
    check_source_error: str | None = Field(
        default=None, description="Why the last check of the database failed."
    )


class ConsumerOut(RecordOut):
    consumer_group: str
    topic: str
    lag: int = Field(description="Committed messages not yet acked (in flight included).")
    in_flight: int = Field(description="Received, invisible to others, not acked.")
    dead_letters: int
    oldest_pending_at: datetime | None = Field(description="Commit time of the oldest unacked.")
    lag_capped: bool = Field(
        description=f"The group has {COUNT_LIMIT:,} or more unacked deliveries, which is where "
        "counting stops: lag and in_flight are lower bounds."
    )
    dead_letters_capped: bool = Field(
        description=f"The group has {COUNT_LIMIT:,} or more dead letters (a lower bound)."
    )


class OverviewOut(BaseModel):
    at: datetime = Field(description="The database's clock when the figures were read.")
    pending: int = Field(description="Half messages still prepared.")
    oldest_age_seconds: float | None = Field(description="Age of the oldest; null: none.")
    age_buckets: list[AgeBucketOut]
    pending_groups: list[PendingGroupOut]
    oldest: list[OldHalfMessageOut] = Field(description="The oldest pending half messages.")
    minutes: list[MinuteOut] = Field(
        description="Half messages resolved per minute, oldest first; the last minute is the "
        "current one, still filling."
    )
    check_backs: list[CheckBackGroupOut]
    producers: list[ProducerGroupOut]
    consumers: list[ConsumerOut]
    storage: StorageOut | None = Field(
        default=None,
        description="Table sizes, oldest rows, idle consumer groups and the last retention "
        "round; null where not read.",
    )

    @classmethod
    def of(cls, overview: Overview) -> OverviewOut:
        oldest_age = overview.oldest_age
        return cls(
            at=overview.at,
            pending=overview.pending,
            oldest_age_seconds=oldest_age.total_seconds() if oldest_age is not None else None,
            age_buckets=[AgeBucketOut.of(b) for b in overview.age_buckets],
            pending_groups=[
                PendingGroupOut(
                    producer_group=g.producer_group,
                    topic=g.topic,
                    pending=g.pending,
                    due=g.due,
                    oldest_age_seconds=g.oldest_age.total_seconds(),
                )
                for g in overview.pending_groups
            ],
            oldest=[
                OldHalfMessageOut(
                    offset=m.offset,
                    message_id=m.message_id,
                    transaction_id=m.transaction_id,
                    producer_group=m.producer_group,
                    topic=m.topic,
                    born_at=m.born_at,
                    age_seconds=m.age.total_seconds(),
                    check_count=m.check_count,
                    next_check_at=m.next_check_at,
                    check_status=m.check_status,
                    check_detail=m.check_detail,
                )
                for m in overview.oldest
            ],
            minutes=[MinuteOut.of(m) for m in overview.minutes],
            check_backs=[CheckBackGroupOut.of(c) for c in overview.check_backs],
            producers=[ProducerGroupOut.of(p) for p in overview.producers],
            consumers=[ConsumerOut.of(c) for c in overview.consumers],
            storage=StorageOut.of(overview.storage) if overview.storage is not None else None,
        )
