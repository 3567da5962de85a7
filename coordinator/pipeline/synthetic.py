"""Generated transaction histories, for the pipeline's tests, benchmark and demos.

Rows go straight into `messages` and `message_history` with set-based SQL
(a million messages take seconds, not the hours the HTTP API would). They
follow every rule the coordinator keeps: a resolved message has its
`resolved_at` and `resolution_source`, a prepared one has neither, and each
message has its creation row in the history plus one row for its resolution.
The mix is deterministic for a given seed: about 80% committed, 8% rolled
back, 4% discarded, 3% expired and 5% still prepared; a third of the resolved
ones after check-backs.

Its statement, `pipeline_generate_synthetic`, writes test data only; the
coordinator itself never runs it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from coordinator.db.queries import execute_sync

CHUNK = 100_000


def generate(
    conn: psycopg.Connection[Any],
    count: int,
    *,
    anchor: datetime,
    seed: int = 1,
    span_hours: float = 48.0,
    groups: int = 3,
    topics: int = 4,
    check_max: int = 15,
) -> None:
    """Insert `count` transactional messages born within span_hours before anchor."""
    for first in range(1, count + 1, CHUNK):
        with conn.transaction():
            execute_sync(
                conn,
                "pipeline_generate_synthetic",
                {
                    "first": first,
                    "last": min(count, first + CHUNK - 1),
                    "seed": seed,
                    "anchor": anchor,
                    "span_hours": span_hours,
                    "groups": groups,
                    "topics": topics,
                    "check_max": check_max,
                },
            )
