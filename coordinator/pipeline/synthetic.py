"""Generated transaction histories, for the pipeline's tests, benchmark and demos.

Rows go straight into `messages` and `message_history` with set-based SQL
(a million messages take seconds, not the hours the HTTP API would). They
follow every rule the coordinator keeps: a resolved message has its
`resolved_at` and `resolution_source`, a prepared one has neither, and each
message has its creation row in the history plus one row for its resolution.
The mix is deterministic for a given seed: about 80% committed, 8% rolled
back, 4% discarded, 3% expired and 5% still prepared; a third of the resolved
ones after check-backs.

This SQL writes test data only, which is why it lives here rather than in the
coordinator's queries.sql.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

_GENERATE = """
WITH randoms AS (
    -- independent uniform numbers in [0, 1) per message, from hashes of its number
    SELECT i,
           (hashint8extended(i, %(seed)s::bigint) & 2147483647) / 2147483648.0 AS r_group,
           (hashint8extended(i, %(seed)s::bigint + 1) & 2147483647) / 2147483648.0 AS r_topic,
           (hashint8extended(i, %(seed)s::bigint + 2) & 2147483647) / 2147483648.0 AS r_state,
           (hashint8extended(i, %(seed)s::bigint + 3) & 2147483647) / 2147483648.0 AS r_born,
           (hashint8extended(i, %(seed)s::bigint + 4) & 2147483647) / 2147483648.0 AS r_checks,
           (hashint8extended(i, %(seed)s::bigint + 5) & 2147483647) / 2147483648.0 AS r_latency
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
),
shaped AS (
    SELECT i, r_latency,
           'group-' || floor(r_group * %(groups)s)::int AS producer_group,
           'topic-' || floor(r_topic * %(topics)s)::int AS topic,
           CASE WHEN r_state < 0.80 THEN 'committed'
                WHEN r_state < 0.88 THEN 'rolled_back'
                WHEN r_state < 0.92 THEN 'discarded'
                WHEN r_state < 0.95 THEN 'expired'
                ELSE 'prepared' END AS state,
           %(anchor)s::timestamptz
               - make_interval(secs => r_born * %(span_hours)s::float8 * 3600) AS born_at,
           r_checks
    FROM randoms
),
timed AS (
    SELECT *,
           CASE WHEN state = 'discarded' THEN %(check_max)s::int
                WHEN state IN ('expired', 'prepared') THEN floor(r_checks * 3)::int
                WHEN r_checks < 0.66 THEN 0
                ELSE 1 + floor((r_checks - 0.66) / 0.34 * 4)::int END AS check_count
    FROM shaped
),
resolved AS (
    SELECT *,
           CASE WHEN state = 'prepared' THEN NULL
                WHEN state = 'expired' THEN 'expiry'
                WHEN state = 'discarded' THEN 'discard'
                WHEN check_count = 0 THEN 'client'
                ELSE 'check' END AS resolution_source,
           CASE WHEN state = 'prepared' THEN NULL
                WHEN state = 'expired'
                    THEN born_at + make_interval(hours => 72, secs => r_latency * 60)
                WHEN check_count = 0 THEN born_at + make_interval(secs => 0.05 + r_latency * 3)
                ELSE born_at + make_interval(secs => 6 + 60 * (check_count - 1) + r_latency * 5)
           END AS resolved_at
    FROM timed
),
inserted AS (
    INSERT INTO messages (
        message_id, transaction_id, kind, producer_group, topic, tags, keys, body,
        properties, state, check_count, born_at, next_check_at, resolved_at, resolution_source
    )
    SELECT 'SYN-' || %(seed)s::text || '-' || i, 'tx-' || %(seed)s::text || '-' || i,
           'transactional', producer_group, topic, 'synthetic', ARRAY['order-' || i],
           convert_to('synthetic message ' || i, 'UTF8'),
           jsonb_build_object('order_id', i::text), state, check_count, born_at,
           CASE WHEN state = 'prepared' THEN %(anchor)s::timestamptz + interval '60 seconds' END,
           resolved_at, resolution_source
    FROM resolved
    ORDER BY i
    RETURNING id, state, born_at, resolved_at, resolution_source
)
INSERT INTO message_history (message_offset, at, source, from_state, to_state)
SELECT id, born_at, 'client', NULL, 'prepared' FROM inserted
UNION ALL
SELECT id, resolved_at, resolution_source, 'prepared', state
FROM inserted WHERE state <> 'prepared'
"""

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
            conn.execute(
                _GENERATE,
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
