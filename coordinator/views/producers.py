"""Producer instances: GET /v1/producers and `coordinator producers --json`."""

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


class ProducersOut(BaseModel):
    producers: list[ProducerOut]
