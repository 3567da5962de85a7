"""Producer instances and check sources: GET /v1/producers, `coordinator producers --json`."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from coordinator.views.records import RecordOut


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


class CheckSourceOut(RecordOut):
    """A producer group's database that answers its check-backs; never its password."""

    producer_group: str
    url: str = Field(description="The libpq URL, `***` in place of its password.")
    barrier_table: str
    mode: Literal["fallback", "only"] = Field(
        description="fallback: only while the group has no live instance; only: every check."
    )
    created_at: datetime
    updated_at: datetime
    last_check_at: datetime | None = Field(description="When the database was last asked.")
    last_ok: bool | None = Field(description="Whether that check got the barrier's answer.")
    last_error: str | None = Field(description="Why the last check failed, as a sentence.")
    consecutive_failures: int


class CheckSourcesOut(BaseModel):
    check_sources: list[CheckSourceOut]


class ProducersOut(BaseModel):
    producers: list[ProducerOut]
    check_sources: list[CheckSourceOut] = Field(
        default_factory=list,
        description="The listed groups that are settled by their own database.",
    )
